"""A check run on a remote learner gives the verdict it gives in-process: the wire (course.grading.wire) carries what
the check needs and nothing that runs code.

The "kernel" here is ``course.grading.learner_side``'s own call handling, in this process, behind the same framing
as the real one (the checker's side reads every reply with ``weights_only=True``); the real kernel's round trip is
``tests/course/test_remote_verdicts.py``'s (integration). Each case runs one course check on one answer both ways.
"""

from __future__ import annotations

import io

import pytest
import torch
import torch.nn.functional as F

from course.exercises import lesson02, lesson03, lesson05, lesson10, lesson11, lesson12, lesson13
from course.grading import learner_side, remote, wire


class Loopback:
    """A channel to a 'kernel' in this process: requests and replies framed as on the real channel."""

    def __init__(self, handles: dict) -> None:
        self.handles = handles

    def ask(self, request: dict):
        sent = wire.unframe(wire.frame(request, trusted=True), trusted=True)
        return wire.unframe(wire.frame(learner_side._call(sent, self.handles)))


def remotely(check, answer):
    """``check`` run on ``answer`` as the checker runs it: on a RemoteLearner whose calls cross the wire."""
    handles: dict = {}
    hello = wire.unframe(wire.frame({"answer": learner_side._describe(answer, handles)}))
    return check(remote.from_kernel(hello["answer"], Loopback(handles)))


def right_projection(x, weight, bias):
    return x @ weight.T + bias


def in_place_projection(x, weight, bias):
    x.mul_(2)
    return right_projection(x / 2, weight, bias)


def shortcut_attention(q, k):
    return F.scaled_dot_product_attention(q, k, torch.eye(k.size(-2), dtype=k.dtype).expand(*k.shape[:-1], -1))


def make_hook(head, num_heads, source):
    def hook(module, args):
        x = args[0].clone()
        d = x.size(-1) // num_heads
        x[..., head * d : (head + 1) * d] = source[..., head * d : (head + 1) * d]
        return (x,)

    return hook


def absorb_in_place(layer):
    answer = lesson11.reference_absorbed_weights(layer)
    layer.q_proj.weight.data.zero_()
    return answer


def lens_changing_the_norm(residuals, norm, unembedding, io_, s):
    norm.eps = 0.5
    return lesson12.reference_logit_lens(residuals, norm, unembedding, io_, s)


def decoder_by_the_whole_layer(layer, tgt, memory, tgt_mask, memory_key_padding_mask):
    return layer(tgt, memory, tgt_mask=tgt_mask, memory_key_padding_mask=memory_key_padding_mask)


def window_mask(T, window):
    i, j = torch.arange(T)[:, None], torch.arange(T)[None, :]
    return (j > i) | (j <= i - window)


def window_mask_by_the_library(T, window):
    from helpers.masks import sliding_window_mask

    return sliding_window_mask(T, window)


def rolling_write_in_place(buffer, new, position):
    buffer[:, :, position % buffer.size(2)] = new
    return buffer


def hybrid_cache_bytes(config, T, bytes_per_number=2):
    """Reads a GPTConfig the check sent to the kernel (a trusted load there): its kinds, window, heads and size."""
    tokens = sum(T if kind == "global" else min(T, config.window) for kind in config.layer_kinds)
    return tokens * 2 * config.num_kv_heads * config.head_dim * bytes_per_number


def hybrid_cache_bytes_all_local(config, T, bytes_per_number=2):
    return (
        len(config.layer_kinds) * min(T, config.window) * 2 * config.num_kv_heads * config.head_dim * bytes_per_number
    )


CASES = {
    "right": (lesson02.check_linear_projection, right_projection, "pass"),
    "changed its input in place": (lesson02.check_linear_projection, in_place_projection, "wrong"),
    "numpy": (lesson02.check_linear_projection, lambda x, w, b: right_projection(x, w, b).numpy(), "wrong"),
    "a shortcut": (lesson03.check_attention_weights, shortcut_attention, "wrong"),
    "not attempted": (
        lesson02.check_linear_projection,
        lambda x, w, b: (_ for _ in ()).throw(NotImplementedError()),
        "not attempted",
    ),
    "a hook returned from the learner's function": (lesson10.check_patch_hook, make_hook, "pass"),
    "a module's weights changed in the kernel": (lesson11.check_absorbed_weights, absorb_in_place, "wrong"),
    "a module's attribute changed in the kernel": (lesson12.check_logit_lens, lens_changing_the_norm, "wrong"),
    "a forward pre-hook of the check on the module it passes": (
        lesson05.check_decoder_layer_forward,
        decoder_by_the_whole_layer,
        "wrong",
    ),
    "the reference called": (lesson12.check_logit_lens, lesson12.reference_logit_lens, "wrong"),
    "a boolean mask from two ints": (lesson13.check_window_mask, window_mask, "pass"),
    "the library's mask called in the kernel": (lesson13.check_window_mask, window_mask_by_the_library, "wrong"),
    "a buffer written in place in the kernel": (lesson13.check_rolling_write, rolling_write_in_place, "wrong"),
    "a model's config sent to the kernel": (lesson13.check_hybrid_cache_bytes, hybrid_cache_bytes, "pass"),
    "a config read wrongly in the kernel": (lesson13.check_hybrid_cache_bytes, hybrid_cache_bytes_all_local, "wrong"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_remote_answer_gets_the_verdict_it_gets_in_process(case, capsys):
    check, answer, status = CASES[case]
    local = check(answer)
    far = remotely(check, answer)
    assert (far.status, far.message) == (local.status, local.message) and far.status == status, (far, local)


def test_code_in_a_reply_is_refused_not_run():
    class Payload:
        def __reduce__(self):
            return (print, ("ran code from the kernel",))

    buffer = io.BytesIO()
    torch.save({"result": Payload()}, buffer)
    import base64

    with pytest.raises(wire.Unreadable):
        wire.unframe(base64.b64encode(buffer.getvalue()).decode())


def test_a_tensor_subclass_from_the_kernel_arrives_as_its_plain_numbers():
    class Agreeable(torch.Tensor):
        pass

    sent = learner_side._describe(torch.ones(2).as_subclass(Agreeable), {})
    received = remote.from_kernel(wire.unframe(wire.frame(sent)), channel=None)
    assert type(received) is torch.Tensor and torch.equal(received, torch.ones(2))


def test_a_kernel_that_sends_something_else_stops_the_check_with_an_error():
    answer = remote.RemoteLearner(channel=None, handle=0, name="f", signature=None)

    class Silent:
        def ask(self, request):
            raise remote.ChannelBroken("the kernel stopped answering")

    answer._channel = Silent()
    entry = remote.grade(
        lesson02.check_linear_projection,
        "f",
        answer._channel,
        {"defined": True, "answer": (wire.TAG, "handle", 0, "f", None)},
    )
    assert entry["status"] == "error" and "stopped answering" in entry["message"], entry
