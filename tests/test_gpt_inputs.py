"""helpers.gpt.GPT takes token ids of any integer dtype (issue 36's POOR list: uint8 and int16 ids reached
nn.Embedding, which takes only int32 and int64, and failed with torch's message)."""

from __future__ import annotations

import pytest
import torch

from helpers.gpt import GPT, GPTConfig


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int8, torch.int16, torch.int32])
def test_ids_of_any_integer_dtype_give_the_logits_of_int64_ids(dtype):
    torch.manual_seed(0)
    model = GPT(GPTConfig(vocab_size=20, embed_dim=16, num_heads=4, num_layers=1)).eval()
    ids = torch.randint(20, (2, 7))
    with torch.no_grad():
        torch.testing.assert_close(model(ids.to(dtype)), model(ids))
