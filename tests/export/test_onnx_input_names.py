"""ONNX inputs named like the exporter's own values (``cat_1``: TorchEasyRec's Criteo feature names) load."""

import numpy as np
import onnxruntime as ort
import torch

from recpipe.export.onnx import write_onnx


class _TwoCats(torch.nn.Module):
    def forward(self, dense: torch.Tensor, pooled: torch.Tensor) -> torch.Tensor:
        a = torch.cat([dense, pooled], dim=1)  # exported as value "cat"
        b = torch.cat([a, pooled], dim=1)  # exported as value "cat_1", the name the input is given
        return b.sum(dim=1)


def test_an_input_named_like_an_exported_value_loads_and_scores(tmp_path):
    x = (torch.ones(2, 3), torch.full((2, 2), 2.0))
    program = torch.export.export(_TwoCats(), x)
    write_onnx(tmp_path, program, ["dense", "cat_1"])
    session = ort.InferenceSession(str(tmp_path / "dense.onnx"), providers=["CPUExecutionProvider"])
    assert [i.name for i in session.get_inputs()] == ["dense", "cat_1"]
    out = session.run(["logits"], {"dense": x[0].numpy(), "cat_1": x[1].numpy()})[0]
    np.testing.assert_allclose(out, [11.0, 11.0])
