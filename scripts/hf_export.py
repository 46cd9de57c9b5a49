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
    python scripts/hf_export.py llama OUT.onnx --with-past         # a decoder with its KV cache

``--with-past`` exports a decoder (``DECODERS``: GPT-2 small, and a Llama-style ~150M model with
grouped-query attention: hidden 768, 12 layers, 12 heads, 4 KV heads, vocabulary 32000) as Hugging Face
Optimum does: inputs ``input_ids`` [batch, seq], ``attention_mask`` [batch, past + seq] and
``past_key_values.{i}.key|value`` [batch, kv_heads, past, head_dim]; outputs ``logits`` and
``present.{i}.key|value`` [batch, kv_heads, past + seq, head_dim]; every dim symbolic (``past`` may be
0: the prompt's step). Positions follow from ``past`` (no ``position_ids`` input: no padding). The causal
mask is built here from ``attention_mask`` with plain comparisons (transformers 5's own mask code exports
a ``GatherND`` over vmapped indices).

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

# Per architecture: the config and model classes in ``transformers``; the inputs ("text": ``input_ids`` and
# ``attention_mask``; "causal": ``input_ids``, with the mask when the axes are dynamic; "image":
# ``pixel_values`` [batch, 3, 224, 224], whose batch alone is dynamic); the config fields --layers, --width,
# --heads and the feed-forward width (4 x width) set, where they are not the usual ``num_hidden_layers``...
# names; and overrides of the library's default config.
LLAMA_STYLE = {"hidden_size": 768, "intermediate_size": 3072, "num_hidden_layers": 12,
               "num_attention_heads": 12, "num_key_value_heads": 4, "head_dim": 64, "use_cache": False}
ARCHS = {
    "gpt2": ("GPT2Config", "GPT2LMHeadModel", "causal", ("n_layer", "n_embd", "n_head", "n_inner"),
             {"use_cache": False}),
    "bert": ("BertConfig", "BertModel", "text", None, {}),
    "distilbert": ("DistilBertConfig", "DistilBertModel", "text",
                   ("n_layers", "dim", "n_heads", "hidden_dim"), {}),
    "vit": ("ViTConfig", "ViTModel", "image", None, {}),
    # positions count from padding_idx + 1: 514 rows serve 512 tokens (roberta-base's checkpoint has them)
    "roberta": ("RobertaConfig", "RobertaModel", "text", None, {"max_position_embeddings": 514}),
    "albert": ("AlbertConfig", "AlbertModel", "text", None, {}),
    "electra": ("ElectraConfig", "ElectraModel", "text", None, {}),
    # DeBERTa-v3-base's relative attention (log position buckets, c2p and p2c); the library's default
    # config (v2-xlarge) has none
    "deberta-v2": ("DebertaV2Config", "DebertaV2Model", "text", None,
                   {"hidden_size": 768, "num_hidden_layers": 12, "num_attention_heads": 12,
                    "intermediate_size": 3072, "relative_attention": True, "position_buckets": 256,
                    "max_relative_positions": -1, "pos_att_type": ["p2c", "c2p"],
                    "norm_rel_ebd": "layer_norm", "share_att_key": True, "position_biased_input": False}),
    "mpnet": ("MPNetConfig", "MPNetModel", "text", None, {"max_position_embeddings": 514}),
    # GPT-Neo 125M, and ~150M Llama-style decoders with grouped-query attention (``DECODERS``' llama): the
    # libraries' defaults (1.3B, 7B) do not fit one ONNX file
    "gpt-neo": ("GPTNeoConfig", "GPTNeoModel", "causal",
                ("num_layers", "hidden_size", "num_heads", "intermediate_size"),
                {"hidden_size": 768, "num_layers": 12, "num_heads": 12, "use_cache": False,
                 "attention_types": [[["global", "local"], 6]]}),
    "llama": ("LlamaConfig", "LlamaModel", "causal", None, {**LLAMA_STYLE, "vocab_size": 32000}),
    "qwen2": ("Qwen2Config", "Qwen2Model", "causal", None, LLAMA_STYLE),
    "mistral": ("MistralConfig", "MistralModel", "causal", None, LLAMA_STYLE),
    "t5-encoder": ("T5Config", "T5EncoderModel", "text", ("num_layers", "d_model", "num_heads", "d_ff"), {}),
    "bart-encoder": ("BartConfig", "BartModel", "text",
                     ("encoder_layers", "d_model", "encoder_attention_heads", "encoder_ffn_dim"), {}),
    # 512 positions (the default 77 would not take the longest sequence)
    "clip-text": ("CLIPTextConfig", "CLIPTextModel", "text", None, {"max_position_embeddings": 512}),
    "clip-vision": ("CLIPVisionConfig", "CLIPVisionModel", "image", None, {}),
    "swin": ("SwinConfig", "SwinModel", "image", None, {}),
    "convnext": ("ConvNextConfig", "ConvNextModel", "image", None, {}),  # ConvNeXt-T
}
MODELS = tuple(ARCHS)
DECODERS = ("gpt2", "llama")  # with --with-past
SIZES = ("num_hidden_layers", "hidden_size", "num_attention_heads", "intermediate_size")


def build(name: str, layers: int | None, width: int | None, heads: int | None) -> torch.nn.Module:
    """The library's model for ``name`` from its default config, optionally made smaller (tests)."""
    torch.manual_seed(0)
    config_cls, model_cls, _, fields, overrides = ARCHS[name]
    kwargs = dict(overrides)
    if name == "swin":  # four stages: --layers is the third's depth, the heads double per stage
        kwargs.update({k: v for k, v in (("depths", layers and [1, 1, layers, 1]), ("embed_dim", width),
                                         ("num_heads", heads and [heads * 2**i for i in range(4)])) if v})
    elif name == "convnext":  # four stages: --layers is the third's depth, --width the last's channels
        sizes = width and [width // 8, width // 4, width // 2, width]
        depths = layers and [1, 1, layers, 1]
        kwargs.update({k: v for k, v in (("depths", depths), ("hidden_sizes", sizes)) if v})
    else:
        for key, value in zip(fields or SIZES, (layers, width, heads, width and 4 * width)):
            if value:
                kwargs[key] = value
        if name == "t5-encoder" and width:
            kwargs["d_kv"] = width // (heads or 8)
        if name == "gpt-neo" and layers:
            kwargs["attention_types"] = [[["global", "local"], (layers + 1) // 2]]
            kwargs["num_layers"] = 2 * ((layers + 1) // 2)
        if name in ("llama", "qwen2", "mistral") and width:
            kwargs["head_dim"] = width // (heads or 32)
            kwargs["num_key_value_heads"] = max(1, (heads or 32) // 2)
    config = getattr(transformers, config_cls)(**kwargs)
    model = getattr(transformers, model_cls)
    model = model(config, add_pooling_layer=False) if name == "vit" else model(config)
    if name == "bart-encoder":
        model = model.get_encoder()
    return model.eval()


def example_inputs(name: str, batch: int, seq: int, dynamic: bool = False) -> dict:
    """Seeded inputs by name, in the model's forward order. A causal model exported with dynamic axes takes
    an ``attention_mask`` too (as Optimum's decoder exports do): without one, transformers 5 looks for packed
    sequences in the positions (``torch.diff``, which the torchscript exporter cannot write)."""
    g = torch.Generator().manual_seed(1)
    if ARCHS[name][2] == "image":
        return {"pixel_values": torch.randn(batch, 3, 224, 224, generator=g)}
    ids = torch.randint(0, 1000, (batch, seq), dtype=torch.int64, generator=g)
    if ARCHS[name][2] == "causal" and not dynamic:
        return {"input_ids": ids}
    return {"input_ids": ids, "attention_mask": torch.ones(batch, seq, dtype=torch.int64)}


class Outputs(torch.nn.Module):
    """The model returning a plain tensor (``logits`` or ``last_hidden_state``), not a ModelOutput."""

    def __init__(self, model: torch.nn.Module, key: str, names: tuple):
        super().__init__()
        self.model, self.key, self.names = model, key, names

    def forward(self, *args):
        out = self.model(**dict(zip(self.names, args)), return_dict=True)
        return out.logits if self.key == "gpt2" else out.last_hidden_state


def export(name: str, path: str, batch: int, seq: int, exporter: str, layers: int | None = None,
           width: int | None = None, heads: int | None = None, dynamic: bool = False) -> onnx.ModelProto:
    if dynamic and exporter == "dynamo":  # torch.export specialises an example dim of 1
        batch, seq = max(batch, 2), max(seq, 2)
    inputs = example_inputs(name, batch, seq, dynamic)
    model = Outputs(build(name, layers, width, heads), name, tuple(inputs))
    output = "logits" if name == "gpt2" else "last_hidden_state"
    # dynamic: the batch and sequence axes as dim_params ("batch", "seq"), the shapes as deployed
    axes = {0: "batch"} if ARCHS[name][2] == "image" else {0: "batch", 1: "seq"}
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


def build_decoder(name: str, layers: int | None, width: int | None, heads: int | None,
                  kv_heads: int | None) -> torch.nn.Module:
    """GPT-2 small, or the Llama-style GQA decoder, optionally smaller (tests); seeded random weights."""
    torch.manual_seed(0)
    if name == "gpt2":
        config = transformers.GPT2Config()
        sizes = {"n_layer": layers, "n_embd": width, "n_head": heads}
        cls = transformers.GPT2LMHeadModel
    else:
        config = transformers.LlamaConfig(hidden_size=768, intermediate_size=3072, num_hidden_layers=12,
                                          num_attention_heads=12, num_key_value_heads=4, vocab_size=32000,
                                          tie_word_embeddings=False)
        sizes = {"num_hidden_layers": layers, "hidden_size": width, "num_attention_heads": heads,
                 "num_key_value_heads": kv_heads, "intermediate_size": width and 4 * width}
        cls = transformers.LlamaForCausalLM
    for key, value in sizes.items():
        if value:
            setattr(config, key, value)
    if name == "llama":
        config.head_dim = config.hidden_size // config.num_attention_heads
    config.use_cache = True
    return cls(config).eval()


class WithPast(torch.nn.Module):
    """A decoder taking and returning its KV cache as flat tensors (Optimum's input and output names)."""

    def __init__(self, model: torch.nn.Module, layers: int):
        super().__init__()
        self.model, self.layers = model, layers

    def forward(self, input_ids, attention_mask, *past):
        cache = transformers.DynamicCache(config=self.model.config)
        for i in range(self.layers):
            cache.update(past[2 * i], past[2 * i + 1], i)
        past_len, seq = past[0].shape[2], input_ids.shape[1]
        query = torch.arange(seq) + past_len
        key = torch.arange(past_len + seq)
        # [batch, 1, seq, past + seq]: causal, and the padding of attention_mask
        mask = (key[None, :] <= query[:, None])[None, None] & attention_mask[:, None, None, :].bool()
        out = self.model(input_ids=input_ids, attention_mask=mask, past_key_values=cache, use_cache=True,
                         return_dict=True)
        present = [t for layer in out.past_key_values.layers for t in (layer.keys, layer.values)]
        return (out.logits, *present)


def export_with_past(name: str, path: str, layers: int | None = None, width: int | None = None,
                     heads: int | None = None, kv_heads: int | None = None) -> onnx.ModelProto:
    """Decoder ``name`` with its KV cache (the module docstring), exported by the dynamo exporter."""
    model = build_decoder(name, layers, width, heads, kv_heads)
    config = model.config
    n_layers = config.num_hidden_layers
    kv = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    head_dim = config.hidden_size // config.num_attention_heads
    # example sizes above 1 everywhere, so the exporter keeps each dim symbolic
    batch, seq, past_len = 2, 3, 5
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 1000, (batch, seq), dtype=torch.int64, generator=g)
    mask = torch.ones(batch, past_len + seq, dtype=torch.int64)
    past = tuple(torch.randn(batch, kv, past_len, head_dim, generator=g) for _ in range(2 * n_layers))
    b = torch.export.Dim("batch", min=1, max=64)
    s = torch.export.Dim("seq", min=1, max=2048)
    p = torch.export.Dim("past", min=0, max=2048)
    dynamic = ({0: b, 1: s}, {0: b, 1: torch.export.Dim.DYNAMIC}, tuple({0: b, 2: p} for _ in past))
    kv_names = [f"{i}.{k}" for i in range(n_layers) for k in ("key", "value")]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(WithPast(model, n_layers), (ids, mask, *past), dynamo=True,
                                    external_data=False,
                                    input_names=["input_ids", "attention_mask",
                                                 *(f"past_key_values.{n}" for n in kv_names)],
                                    output_names=["logits", *(f"present.{n}" for n in kv_names)],
                                    dynamic_shapes=dynamic)
    proto = program.model_proto
    # the exporter names the mask's length after its own symbol; Optimum's files say what it is
    mask_dim = proto.graph.input[1].type.tensor_type.shape.dim[1]
    internal = mask_dim.dim_param
    for value in (*proto.graph.input, *proto.graph.output, *proto.graph.value_info):
        for d in value.type.tensor_type.shape.dim:
            if d.dim_param == internal:
                d.dim_param = "past + seq"
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, path, save_as_external_data=False)
    return proto


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", choices=tuple(dict.fromkeys((*MODELS, *DECODERS))))
    parser.add_argument("out", help="path of the .onnx file to write")
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--exporter", choices=("dynamo", "torchscript"), default="dynamo")
    parser.add_argument("--layers", type=int, help="fewer layers than the default config (tests)")
    parser.add_argument("--width", type=int, help="a narrower hidden size (tests)")
    parser.add_argument("--heads", type=int, help="fewer attention heads (tests)")
    parser.add_argument("--dynamic", action="store_true", help="symbolic batch and sequence axes")
    parser.add_argument("--with-past", action="store_true", help="a decoder with its KV cache (DECODERS)")
    parser.add_argument("--kv-heads", type=int, help="fewer key/value heads (llama; tests)")
    args = parser.parse_args(argv)
    if args.with_past or args.model not in MODELS:
        if args.model not in DECODERS or not args.with_past:
            parser.error(f"--with-past exports {', '.join(DECODERS)}; {args.model} needs --with-past")
        proto = export_with_past(args.model, args.out, args.layers, args.width, args.heads, args.kv_heads)
        ops = sorted({n.op_type for n in proto.graph.node})
        print(f"{args.model} with past (torch {torch.__version__}, transformers {transformers.__version__}) "
              f"-> {args.out}: {len(proto.graph.node)} nodes; ops {ops}")
        return 0
    proto = export(args.model, args.out, args.batch, args.seq, args.exporter, args.layers, args.width,
                   args.heads, args.dynamic)
    ops = sorted({n.op_type for n in proto.graph.node})
    print(f"{args.model} (batch {args.batch}, seq {args.seq}, {args.exporter}, torch {torch.__version__}, "
          f"transformers {transformers.__version__}) -> {args.out}: {len(proto.graph.node)} nodes; ops {ops}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
