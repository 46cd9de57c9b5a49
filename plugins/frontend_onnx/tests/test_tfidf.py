"""TfIdfVectorizer (``convert_text``) in the forms ONNX's node tests leave out (IDF and TFIDF modes, weights,
a 1-D input, a pool with a repeated n-gram, several n-grams in one output column), against onnxruntime."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper

import nnvm

NNVM_PLUGINS = "onnx,llvm-x86"

POOL = dict(ngram_counts=[0, 4], pool_int64s=[2, 3, 5, 4, 5, 6, 7, 8, 6, 7])  # 4 unigrams, 3 bigrams


def _model(shape, dtype, **attrs):
    node = helper.make_node("TfIdfVectorizer", ["x"], ["y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", dtype, shape)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 9)], ir_version=8)


@pytest.mark.parametrize("case", [
    dict(mode="IDF", min_gram_length=1, max_gram_length=2, max_skip_count=2, ngram_indexes=list(range(7)),
         weights=[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5], **POOL),
    dict(mode="TFIDF", min_gram_length=1, max_gram_length=2, max_skip_count=3, ngram_indexes=list(range(7)),
         weights=[0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5], **POOL),
    dict(mode="TFIDF", min_gram_length=2, max_gram_length=2, max_skip_count=1, ngram_indexes=list(range(7)),
         **POOL),
    dict(mode="IDF", min_gram_length=1, max_gram_length=1, max_skip_count=4, ngram_indexes=list(range(7)),
         **POOL),
    dict(mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=1,
         ngram_indexes=[6, 0, 0, 2, 4, 4, 1], **POOL),
], ids=["idf", "tfidf", "tfidf-no-weights", "idf-unigrams", "shared-columns"])
@pytest.mark.parametrize("shape", [(3, 12), (12,)], ids=["batch", "1d"])
def test_tfidf_vectorizer_matches_onnxruntime(case, shape):
    rng = np.random.default_rng(7)
    x = rng.integers(2, 9, size=shape).astype(np.int32)
    model = _model(list(shape), TensorProto.INT32, **case)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    (want,) = sess.run(None, {"x": x})
    (got,) = nnvm.compile(model, target="llvm").run(x)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0)
    assert want.any(), "the input should hit some n-grams"


def test_a_pool_listing_an_ngram_twice_is_an_error():
    model = _model([12], TensorProto.INT64, mode="TF", min_gram_length=1, max_gram_length=2, max_skip_count=0,
                   ngram_indexes=list(range(5)), ngram_counts=[0, 2], pool_int64s=[5, 6, 6, 7, 6, 7])
    with pytest.raises(nnvm.Error, match=r"\(TfIdfVectorizer, opset 9\): the pool lists the 2-gram "
                                         r"\(6, 7\) twice"):
        nnvm.compile(model, target="llvm")
