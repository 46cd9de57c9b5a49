"""Export a CNN of the issue-19 zoo (``scripts/torch_zoo.py``) with a dynamic batch: the input's and the
output's first dim is the dim_param ``batch`` (issue 39: a CNN compiled once for every batch).

A script of its own, so the fixed-batch exports (whose cache stamps hash ``torch_zoo.py``) stay valid.
Runs in the torch venv (``nnvm_testing.frontend_onnx.torch_models.zoo_model_path(..., dynamic_batch=True)``).

    python scripts/torch_zoo_dynamic.py googlenet OUT.onnx
"""

from __future__ import annotations

import argparse
import sys
import warnings

import onnx
import torch
import torch_export
import torch_zoo


def export(name: str, path: str) -> onnx.ModelProto:
    """As ``torch_zoo.export``, the batch a ``torch.export.Dim`` (traced at 2: torch specialises 1)."""
    torch_export.MODELS.setdefault(name, torch_zoo.MODELS[name])
    model = torch_export.build(name)
    batch = torch.export.Dim("batch", min=1, max=4096)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the exporter is chatty; failures still raise
        program = torch.onnx.export(model, (torch_zoo.example_input(name, 2),), dynamo=True,
                                    external_data=False, input_names=["data"],
                                    output_names=[torch_zoo.OUTPUT_NAME], dynamic_shapes=({0: batch},))
    proto = program.model_proto
    onnx.checker.check_model(proto, full_check=True)
    onnx.save(proto, path, save_as_external_data=False)
    return proto


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("model", choices=sorted(torch_zoo.CNNS))
    parser.add_argument("out", help="path of the .onnx file to write")
    args = parser.parse_args(argv)
    proto = export(args.model, args.out)
    print(f"{args.model} (symbolic batch, torch {torch.__version__}) -> {args.out}: "
          f"{torch_export.describe(proto)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
