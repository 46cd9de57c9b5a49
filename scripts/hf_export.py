"""Export Hugging Face ``transformers`` models, default configs and seeded random weights, to ONNX.

Runs in the torch venv with ``transformers`` (``nnvm_testing.frontend_onnx.torch_models.hf_model_path``
builds it and calls this script); the main environment imports neither. These are the models as people
deploy them: the library's own modules (``GPT2LMHeadModel``, ``BertModel``, ``DistilBertModel``,
``ViTModel``), built from their default configuration (GPT-2 small, BERT-base, DistilBERT-base, ViT-B/16)
with ``torch.manual_seed(0)`` weights (no hub download), in eval mode, exported by torch's default
(dynamo) exporter with fixed shapes, or by the legacy tracer (``--exporter torchscript``: the encoders
only; it has no ONNX form for the ``aten::diff`` in transformers 5's causal-mask code, so GPT-2 fails).

    python scripts/hf_export.py gpt2 OUT.onnx --seq 128
    python scripts/hf_export.py gpt2 OUT.onnx --seq 16 --layers 2 --width 64 --heads 2   # a test's size

Text models take ``input_ids`` (int64 [batch, seq]) and, the encoders, an ``attention_mask`` (int64, as
tokenizers give it); GPT-2 returns ``logits`` (its tied LM head: [batch, seq, 50257]) without a cache,
the encoders ``last_hidden_state``. ViT takes ``pixel_values`` [batch, 3, 224, 224].
"""

from __future__ import annotations

import argparse
import sys
import warnings

import onnx
import torch
import transformers

MODELS = ("gpt2", "bert", "distilbert", "vit")


def build(name: str, layers: int | None, width: int | None, heads: int | None) -> torch.nn.Module:
    """The library's model for ``name`` from its default config, optionally made smaller (tests)."""
    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config(use_cache=False)
        sizes = {"n_layer": layers, "n_embd": width, "n_head": heads}
        cls = transformers.GPT2LMHeadModel
    elif name == "bert":
        config, cls = transformers.BertConfig(), transformers.BertModel
        sizes = {"num_hidden_layers": layers, "hidden_size": width, "num_attention_heads": heads,
                 "intermediate_size": width and 4 * width}
    elif name == "distilbert":
        config, cls = transformers.DistilBertConfig(), transformers.DistilBertModel
        sizes = {"n_layers": layers, "dim": width, "n_heads": heads, "hidden_dim": width and 4 * width}
    else:
        config, cls = transformers.ViTConfig(), transformers.ViTModel
        sizes = {"num_hidden_layers": layers, "hidden_size": width, "num_attention_heads": heads,
                 "intermediate_size": width and 4 * width}
    for key, value in sizes.items():
        if value:
            setattr(config, key, value)
    model = cls(config, add_pooling_layer=False) if name == "vit" else cls(config)
    return model.eval()


def example_inputs(name: str, batch: int, seq: int) -> dict:
    """Seeded inputs by name, in the model's forward order."""
    g = torch.Generator().manual_seed(1)
    if name == "vit":
        return {"pixel_values": torch.randn(batch, 3, 224, 224, generator=g)}
    ids = torch.randint(0, 1000, (batch, seq), dtype=torch.int64, generator=g)
    if name == "gpt2":
        return {"input_ids": ids}
    return {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.int64)}


class Outputs(torch.nn.Module):
    """The model returning a plain tensor (``logits`` or ``last_hidden_state``), not a ModelOutput."""

    def __init__(self, model: torch.nn.Module, key: str):
        super().__init__()
        self.model, self.key = model, key

    def forward(self, *args):
        names = ("pixel_values",) if self.key == "vit" else ("input_ids", "attention_mask")
        out = self.model(**dict(zip(names, args)), return_dict=True)
        return out.logits if self.key == "gpt2" else out.last_hidden_state


def export(name: str, path: str, batch: int, seq: int, exporter: str, layers: int | None = None,
           width: int | None = None, heads: int | None = None, dynamic: bool = False) -> onnx.ModelProto:
    model = Outputs(build(name, layers, width, heads), name)
    inputs = example_inputs(name, batch, seq)
    output = "logits" if name == "gpt2" else "last_hidden_state"
    # dynamic: the batch and sequence axes as dim_params ("batch", "seq"), the shapes as deployed
    axes = {0: "batch"} if name == "vit" else {0: "batch", 1: "seq"}
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporters are chatty; failures still raise
        if exporter == "dynamo":
            dims = {k: torch.export.Dim(v, min=1, max=512 if v == "seq" else 64) for k, v in axes.items()}
            program = torch.onnx.export(model, tuple(inputs.values()), dynamo=True, external_data=False,
                                        input_names=list(inputs), output_names=[output],
                                        dynamic_shapes=(tuple(dims for _ in inputs),) if dynamic else None)
            proto = program.model_proto
        else:
            import io

            buf = io.BytesIO()
            dynamic_axes = {k: axes for k in (*inputs, output)} if dynamic else None
            torch.onnx.export(model, tuple(inputs.values()), buf, dynamo=False, input_names=list(inputs),
                              output_names=[output], opset_version=17, dynamic_axes=dynamic_axes)
            proto = onnx.load_from_string(buf.getvalue())
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, path, save_as_external_data=False)
    return proto


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", choices=MODELS)
    parser.add_argument("out", help="path of the .onnx file to write")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--exporter", choices=("dynamo", "torchscript"), default="dynamo")
    parser.add_argument("--layers", type=int, help="fewer layers than the default config (tests)")
    parser.add_argument("--width", type=int, help="a narrower hidden size (tests)")
    parser.add_argument("--heads", type=int, help="fewer attention heads (tests)")
    parser.add_argument("--dynamic", action="store_true", help="symbolic batch and sequence axes")
    args = parser.parse_args(argv)
    proto = export(args.model, args.out, args.batch, args.seq, args.exporter, args.layers, args.width,
                   args.heads, args.dynamic)
    ops = sorted({n.op_type for n in proto.graph.node})
    print(f"{args.model} (batch {args.batch}, seq {args.seq}, {args.exporter}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}) -> {args.out}: {len(proto.graph.node)} nodes; ops {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
