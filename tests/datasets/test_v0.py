import json

import numpy as np
import pytest

from v05.datasets import bundled_v0_path, load_v0


def test_bundled_data_counts_licence_and_notice():
    """The bundled copy has 6 snapshots × 512 context rows and 32 train rows each, with LICENSE and NOTICE."""
    ds = load_v0()
    assert len(ds.snapshots) == 6
    assert len(ds.context) == 3072 and set(ds.queries) == {"train"} and len(ds.queries["train"]) == 192
    assert np.all(np.bincount(ds.context.snapshot) == 512)
    assert (bundled_v0_path() / "LICENSE").is_file() and "Apache" in (bundled_v0_path() / "NOTICE").read_text()
    assert ds.snapshot_name(0) == "DeepSeek-R1-Distill-Qwen-1.5B@16"
    assert all(isinstance(t, str) and t for t in ds.texts(ds.context.prompt_id[:5]))


def _write(tmp_path, rows, prompts, *, prompt_file="prompt_dict.json", query="test.jsonl"):
    (tmp_path / "context.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / query).write_text(json.dumps(rows[0]) + "\n")
    (tmp_path / prompt_file).write_text(json.dumps(prompts))


ROW = {"id": 1, "score": 0.2, "type": "context", "model": "m", "step": 3, "dataset": "d"}


def test_any_directory_in_the_format_loads(tmp_path):
    """prompt_dict.json and any query file name are accepted; the split is the file stem."""
    _write(tmp_path, [ROW, ROW | {"id": 2, "step": 7}], {"d_1": "one", "d_2": "two"})
    ds = load_v0(tmp_path)
    assert set(ds.queries) == {"test"} and ds.snapshots == (("d", "m", 3), ("d", "m", 7))
    assert ds.texts(ds.context.prompt_id) == ["one", "two"]


@pytest.mark.parametrize(
    ("rows", "prompts", "msg"),
    [
        ([ROW | {"score": 1.5}], {"d_1": "x"}, "outside"),
        ([{"id": 1}], {"d_1": "x"}, "not a V0 row"),
        ([ROW], {"d_9": "x"}, "not in prompt_dict.json"),
    ],
)
def test_malformed_directories_raise(tmp_path, rows, prompts, msg):
    """Bad scores, missing fields and unknown prompt keys raise ValueError naming the file."""
    _write(tmp_path, rows, prompts)
    with pytest.raises(ValueError, match=msg):
        load_v0(tmp_path)


def test_missing_directory_and_files(tmp_path):
    """A missing directory, prompt file or query file is a ValueError."""
    with pytest.raises(ValueError, match="not found"):
        load_v0(tmp_path / "nope")
    with pytest.raises(ValueError, match="prompts.json or prompt_dict.json"):
        load_v0(tmp_path)
