"""Models built from the course's ideas (``helpers.attention``, ``helpers.layers``, ``helpers.gpt``, …).

- ``translation``: lesson 06's German→English encoder–decoder, its training, decoding, evaluation and command line
- ``pretrained``: lesson 08's real pretrained encoder (all-MiniLM-L6-v2), rebuilt from the course's modules
- ``language_model``: lesson 09's real language model (SmolLM2-135M-Instruct), rebuilt on ``helpers.gpt``
- ``reference_attention``: lesson 14's ``transformers`` attention modules (gpt-oss, Qwen3-Next) as the course's layer
"""
