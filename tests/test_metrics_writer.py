"""MetricsWriter: rows in metrics.jsonl, finite values only, truncation on resume."""

import json

from jaxrl_agent.pipeline.metrics import MetricsWriter, read_metrics


def test_rows_count_and_truncate(tmp_path):
    w = MetricsWriter(str(tmp_path))
    for step in range(5):
        w.write(step, {"loss": float(step), "nan": float("nan")})
    assert w.lines == 5
    w.truncate(3)  # a resume from a checkpoint that recorded 3 rows
    w.write(3, {"loss": 30.0})
    w.close()
    rows = read_metrics(str(tmp_path))
    assert [(r["step"], r["loss"]) for r in rows] == [(0, 0.0), (1, 1.0), (2, 2.0), (3, 30.0)]
    assert all("nan" not in r for r in rows)
    reopened = MetricsWriter(str(tmp_path))
    assert reopened.lines == 4
    reopened.truncate(10)  # more than there are: nothing changes
    reopened.close()
    with open(tmp_path / "metrics.jsonl") as f:
        assert [json.loads(line)["step"] for line in f] == [0, 1, 2, 3]


def test_disabled_writer_writes_nothing(tmp_path):
    w = MetricsWriter(str(tmp_path / "logs"), enabled=False)
    w.write(0, {"loss": 1.0})
    w.truncate(0)
    w.close()
    assert not (tmp_path / "logs").exists()
