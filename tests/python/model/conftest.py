"""Fixtures of the real-model tests (SmolLM2-135M through transformers, kvtier.hf).

They run on the interpreter scripts/model_env.sh prints (a venv with torch and transformers
over Debian's Python); scripts/test.sh runs them that way. The model comes from
scripts/model.sh. Nothing is skipped unless KVTIER_SKIP_MODEL_TESTS=1 asks for it: a
missing runtime or model fails with the command that provides it.
"""

import os

import pytest

SKIP = os.environ.get("KVTIER_SKIP_MODEL_TESTS") == "1"
PROMPT_TEXT = "/usr/share/common-licenses/GPL-3"  # Debian base-files: always there


@pytest.fixture(scope="session")
def model_and_tokenizer():
    if SKIP:
        pytest.skip("KVTIER_SKIP_MODEL_TESTS=1")
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as e:
        pytest.fail("the real-model tests need torch and transformers (%s): run them with the "
                    "interpreter scripts/model_env.sh prints, as scripts/test.sh does" % e,
                    pytrace=False)
    import kvtier.hf
    try:
        path = kvtier.hf.model_path()
    except FileNotFoundError as e:
        pytest.fail(str(e), pytrace=False)
    import torch
    torch.manual_seed(0)
    torch.set_num_threads(max(1, min(2, os.cpu_count() or 1)))
    return kvtier.hf.load_model(path)


@pytest.fixture(scope="session")
def prompt_ids(model_and_tokenizer):
    """The first 256 tokens of the GPL-3 text."""
    _, tok = model_and_tokenizer
    with open(PROMPT_TEXT, encoding="utf-8") as f:
        text = f.read()
    ids = tok(text)["input_ids"]
    assert len(ids) >= 4096, len(ids)
    return ids
