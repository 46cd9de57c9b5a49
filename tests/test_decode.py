"""Decoding with a KV cache (issue 39, stage 3b): decoders exported with their cache by
``scripts/hf_export.py --with-past`` (GPT-2 and a Llama-style model with grouped-query attention, tiny
configs, seeded random weights), compiled once unbound and run step by step: the prompt with an empty
past (a [1, kv_heads, 0, head_dim] input), then one token at a time with ``present`` fed back as
``past``. The reference is onnxruntime running the same file through the same loop
(``nnvm.generate.greedy``): the same tokens, and logits close at every step (random weights, so the logits
themselves carry the signal). ``nnvm generate`` end to end and a model that is no decoder."""

from __future__ import annotations

import numpy as np
import pytest

from nnvm.cli import main
from nnvm.generate import Decoder, greedy, peer_step
from nnvm_testing.frontend_onnx import torch_models
from nnvm_testing.venvs import pytest_venv

TINY = {"gpt2": {"layers": 2, "width": 64, "heads": 2},
        "llama": {"layers": 2, "width": 64, "heads": 4, "kv_heads": 2}}  # 4 query heads share 2 KV heads


@pytest.fixture(scope="module", params=sorted(TINY))
def decoder(request):
    path = pytest_venv(torch_models.hf_decoder_path, request.param, **TINY[request.param])
    return path, Decoder(path, tuning_log=False)


def _logged(step, log):
    def run(feeds):
        outs = step(feeds)
        log.append(outs[0][:, -1].copy())
        return outs
    return run


def test_greedy_tokens_and_logits_match_onnxruntime(decoder):
    path, dec = decoder
    assert dec.module.stats()["symbolic"]["mode"] == "kernels"  # one compile, its kernels take the dims
    ids = np.random.default_rng(3).integers(0, 1000, (1, 7))
    ours, theirs = [], []
    got = greedy(_logged(dec.step, ours), dec.spec, ids, 8)
    step, spec, _ = peer_step("onnxruntime", path, 1)
    want = greedy(_logged(step, theirs), spec, ids, 8)
    assert got["tokens"].shape == (1, 8)
    np.testing.assert_array_equal(got["tokens"], want["tokens"])
    for k, (a, b) in enumerate(zip(ours, theirs)):
        err = float(np.abs(a - b).max() / np.abs(b).max())
        assert err < 1e-4, f"{path} step {k}: max relative error {err:.2e} against onnxruntime"
    # a decode step reuses its bucket's memory plan (past 7..15 share one): not one plan a step
    assert dec.generate(ids, 8)["plans"] <= 2


def test_batch_of_two_prompts(decoder):
    """Batch 2: each row decodes as it would alone."""
    path, dec = decoder
    ids = np.random.default_rng(4).integers(0, 1000, (2, 5))
    both = dec.generate(ids, 4)["tokens"]
    for row in range(2):
        np.testing.assert_array_equal(both[row], dec.generate(ids[row:row + 1], 4)["tokens"][0])


def test_present_is_fed_back_as_past_without_copies(decoder):
    """The cache is never copied but by the graph's own ``Concat(past, new)``: every ``past`` input is read
    where the caller's array is and every ``present`` output written into the array handed back
    (``make_plan``'s ``uses``), so the step's ``present`` is the next step's ``past`` as it stands. The
    arrays passed in are left as they were, no output lies in the module's arena, and a step's
    ``present`` holds its ``past`` followed by the new token's entry."""
    from nnvm.generate import PAST, PRESENT

    _, dec = decoder
    ids = np.random.default_rng(5).integers(0, 1000, (1, 6))
    outs = dec.step(dec.spec.first_feeds(ids))
    token = np.argmax(outs[dec.spec.logits][:, -1], -1)[:, None]
    feeds = dec.spec.next_feeds(outs, token, 6)
    before = {k: v.copy() for k, v in feeds.items() if PAST.match(k)}
    outs2 = dec.step(feeds)
    plan = dec.module.plan
    assert all("uses" in d for d in plan["inputs"] if PAST.match(d["name"])), plan["inputs"]
    assert all("uses" in d for d in plan["outputs"] if PRESENT.match(d["name"])), plan["outputs"]
    arena = dec.module._last._free[0].arena
    by_name = dict(zip(dec.spec.outputs, outs2))
    for past, present in dec.spec.feeds.items():
        np.testing.assert_array_equal(feeds[past], before[past], err_msg=f"{past} was written")
        assert not np.shares_memory(by_name[present], arena), present
        assert by_name[present].shape[2] == 7
        np.testing.assert_array_equal(by_name[present][:, :, :6], before[past], err_msg=present)


def test_generate_cli(capsys):
    """End to end on one model (the command is the same for every decoder; its compile is the cost)."""
    path = pytest_venv(torch_models.hf_decoder_path, "llama", **TINY["llama"])
    assert main(["generate", path, "--prompt-len", "6", "--new-tokens", "5", "--threads", "1",
                 "--compare", "onnxruntime"]) == 0
    out = capsys.readouterr().out
    assert "tokens/s" in out and "prefill" in out and "same tokens" in out


def test_generate_refuses_a_model_without_a_cache(tmp_path, capsys):
    """A model with no past inputs: one sentence, exit status 1."""
    import onnx
    from onnx import TensorProto, helper

    graph = helper.make_graph(
        [helper.make_node("Relu", ["input_ids"], ["logits"])], "g",
        [helper.make_tensor_value_info("input_ids", TensorProto.FLOAT, ["batch", "seq"])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["batch", "seq"])])
    path = tmp_path / "plain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert main(["generate", str(path), "--new-tokens", "2"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is not a decoder exported with its KV cache" in err, err


def test_a_mask_of_the_wrong_length_names_the_input(decoder):
    """``attention_mask`` is declared [batch, past + seq]: a length that is not past + seq is one sentence."""
    import nnvm

    _, dec = decoder
    feeds = dec.spec.first_feeds(np.zeros((1, 3), np.int64))
    feeds["attention_mask"] = np.ones((1, 4), np.int64)
    with pytest.raises(nnvm.InputError, match=r"input 'attention_mask' dim 1 \(past \+ seq\) is 4, but "
                                              r"past = 0 .*seq = 3 .* make it 3"):
        dec.step(feeds)


def test_plan_buckets():
    """A plan serves every binding up to its bucket: powers of two to 64, then multiples of 64, within the
    bounds; only where no buffer shrinks as the dims grow (``seq - 1`` grows, ``64 - seq`` and ``seq % 8``
    do not)."""
    from nnvm.dynamic import _grows, bucket
    from nnvm.graph.dims import Dim

    values = (0, 1, 2, 3, 5, 33, 64, 65, 129, 200)
    assert [bucket(v) for v in values] == [0, 1, 2, 4, 8, 64, 64, 128, 192, 256]
    assert bucket(33, hi=40) == 40 and bucket(50, hi=40) == 50
    past, seq = Dim.named("past"), Dim.named("seq")
    assert _grows(past + seq - 1) and _grows((past + seq) // 2) and _grows(4 * past * seq)
    assert not _grows(64 - seq) and not _grows(past % 8) and not _grows(past // seq)
