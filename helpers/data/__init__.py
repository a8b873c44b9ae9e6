"""Data and its preparation: what goes into a model before any attention is computed.

- ``corpus``: parallel German–English corpora behind one loader (the course's ``captions`` corpus with gold
  alignments, Multi30k from a local folder or a checksummed download)
- ``tokenization``: word-level and BPE tokenizers with the course's special tokens
- ``batching``: padded batches by token budget, and their padding masks
"""
