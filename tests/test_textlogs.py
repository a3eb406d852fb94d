"""The JSON / NDJSON / CSV / trainer_state parser: formats, detection, rules and problems."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from app.ingest.problems import IngestError, Problem
from app.ingest.textlogs import TextLogRead, parse_text_log

SOURCE = "log.txt"
REFERENCE_JSON = Path(__file__).resolve().parents[1].parent / "shared" / "reference-runs" / "json"


def read(data: bytes | str, **options) -> TextLogRead:
    return parse_text_log(data, source=SOURCE, **options)


def problem(reason: str, line: int | None = None, json_path: str | None = None) -> Problem:
    return Problem(SOURCE, reason, line=line, json_path=json_path)


def rows(read_: TextLogRead, run: str = "default") -> list[tuple[str, int, float, float]]:
    """(tag, step, wall_time, value) of one run, in stored order."""
    points = read_.runs[run]
    return [
        (points.tags[t], int(s), float(w), float(v))
        for t, s, w, v in zip(points.tag, points.step, points.wall_time, points.value)
    ]


def same(actual: list[tuple], expected: list[tuple]) -> bool:
    """Row equality where NaN equals NaN (wall times are often unknown)."""
    return len(actual) == len(expected) and all(
        a == e or (isinstance(a, float) and math.isnan(a) and math.isnan(e))
        for row_a, row_e in zip(actual, expected)
        for a, e in zip(row_a, row_e)
    )


NAN = math.nan

# --- canonical documents -----------------------------------------------------------------------


def test_canonical_document_keeps_points_in_order_with_wall_times() -> None:
    text = json.dumps(
        {
            "run": "r1",
            "points": [
                {"step": 10, "tag": "train/loss", "value": 2.31, "wall_time": 1700000000.0},
                {"step": 10, "tag": "train/lr", "value": 3e-4},
                {"step": 20, "tag": "train/loss", "value": 2.2, "wall_time": None},
            ],
        }
    )
    result = read(text)
    assert result.problems == []
    assert list(result.runs) == ["r1"]
    assert same(
        rows(result, "r1"),
        [
            ("train/loss", 10, 1700000000.0, 2.31),
            ("train/lr", 10, NAN, 3e-4),
            ("train/loss", 20, NAN, 2.2),
        ],
    )


def test_points_arrays_have_the_shared_dtypes() -> None:
    points = read('{"run": "r", "points": [{"step": 1, "tag": "a", "value": 1}]}').runs["r"]
    assert points.tags == ("a",)
    assert (points.tag.dtype, points.step.dtype) == (np.int32, np.int64)
    assert (points.wall_time.dtype, points.value.dtype) == (np.float64, np.float64)


def test_list_of_documents_keeps_runs_in_order_of_first_appearance() -> None:
    text = json.dumps(
        [
            {"run": "b", "points": [{"step": 1, "tag": "loss", "value": 1.0}]},
            {"run": "a", "points": [{"step": 1, "tag": "loss", "value": 2.0}]},
            {"run": "b", "points": [{"step": 2, "tag": "loss", "value": 3.0}]},
        ]
    )
    result = read(text)
    assert list(result.runs) == ["b", "a"]
    assert [v for *_, v in rows(result, "b")] == [1.0, 3.0]


def test_run_name_falls_back_to_argument_then_default() -> None:
    text = '{"points": [{"step": 1, "tag": "loss", "value": 1.0}]}'
    assert list(read(text, run="stem").runs) == ["stem"]
    assert list(read(text).runs) == ["default"]
    assert list(read('{"run": "named", "points": []}', run="stem").runs) == ["named"]


def test_document_problems_carry_the_line_of_the_offending_value() -> None:
    text = (
        '{"run": "r",\n'  # 1
        ' "points": [\n'  # 2
        '  {"step": 1, "tag": "loss", "value": 1.5},\n'  # 3
        "  {\n"  # 4
        '   "step": 2,\n'  # 5
        '   "tag": "loss",\n'  # 6
        '   "value": true\n'  # 7
        "  },\n"  # 8
        '  {"step": 3, "tag": "loss"},\n'  # 9
        '  {"step": 4, "tag": "loss", "value": 1.25}\n'  # 10
        "]}\n"
    )
    result = read(text)
    assert result.problems == [
        problem("value must be a number, got true", 7, "$.points[1].value"),
        problem('missing "value"', 9, "$.points[2]"),
    ]
    assert [(s, v) for _, s, _, v in rows(result, "r")] == [(1, 1.5), (4, 1.25)]


def test_reference_json_runs_come_through_exactly() -> None:
    files = sorted(REFERENCE_JSON.glob("*.json"))
    if not files:
        pytest.skip(f"reference runs not found in {REFERENCE_JSON}")
    for path in files:
        expected = json.loads(path.read_text())
        result = parse_text_log(path.read_bytes(), source=path.name, strict=True)
        points = result.runs[expected["run"]]
        assert list(result.runs) == [expected["run"]]
        assert len(points) == len(expected["points"]), path.name
        tags = [points.tags[i] for i in points.tag]
        assert tags == [p["tag"] for p in expected["points"]], path.name
        assert points.step.tolist() == [p["step"] for p in expected["points"]], path.name
        want = np.array([float(p["value"]) for p in expected["points"]])
        np.testing.assert_array_equal(points.value, want)  # NaN == NaN here, exact otherwise
        walls = [math.nan if p["wall_time"] is None else p["wall_time"] for p in expected["points"]]
        np.testing.assert_array_equal(points.wall_time, np.array(walls))


def test_reference_run_with_nan_losses_keeps_them() -> None:
    path = REFERENCE_JSON / "ext_wordlm_rnn_relu_nan.json"
    if not path.exists():
        pytest.skip(f"reference run not found: {path}")
    points = parse_text_log(path.read_bytes(), source=path.name).runs["ext_wordlm_rnn_relu_nan"]
    loss = points.value[points.tag == points.tags.index("train/loss")]
    assert len(loss) > 0 and np.isnan(loss).all()


# --- NDJSON ------------------------------------------------------------------------------------


def test_ndjson_points_with_optional_run_and_blank_lines() -> None:
    text = (
        '{"step": 1, "tag": "loss", "value": 2.0}\n'
        "\n"
        '{"run": "other", "step": 1, "tag": "loss", "value": 5.0, "wall_time": 12.5}\n'
        "   \r\n"
        '{"step": 2, "tag": "loss", "value": 1.5}\r\n'
    )
    result = read(text, run="stem")
    assert result.problems == []
    assert list(result.runs) == ["stem", "other"]
    assert same(rows(result, "stem"), [("loss", 1, NAN, 2.0), ("loss", 2, NAN, 1.5)])
    assert rows(result, "other") == [("loss", 1, 12.5, 5.0)]


def test_ndjson_bad_line_is_reported_and_the_lines_around_it_kept() -> None:
    text = (
        '{"step": 1, "tag": "loss", "value": 2.0}\n'
        '{"step": 2, "tag": "loss", "value": \n'
        '{"step": 3, "tag": "loss", "value": 1.0} {"extra": 1}\n'
        '  {"step": 4, "tag": "loss" "value": 1.0}\n'
        '{"step": 5, "tag": "loss", "value": 0.5}\n'
    )
    result = read(text)
    assert result.problems == [
        problem("invalid JSON: Expecting value (column 37)", 2),
        problem("invalid JSON: Extra data (column 42)", 3),
        problem("invalid JSON: Expecting ',' delimiter (column 29)", 4),
    ]
    assert [s for _, s, _, _ in rows(result)] == [1, 5]


# --- wide rows ---------------------------------------------------------------------------------


def test_wide_rows_every_numeric_key_but_step_and_time_becomes_a_tag() -> None:
    text = (
        '{"step": 10, "loss": 2.31, "grad_norm": 0.8, "learning_rate": 3e-4, "epoch": 0.1,'
        ' "time": 0.12, "timestamp": 1700000000.5, "runtime": 3, "_runtime": 4,'
        ' "train_runtime": 5, "total_flos": 6}\n'
        '{"step": 20, "loss": 2.0}\n'
    )
    result = read(text)
    assert result.problems == []
    assert result.runs["default"].tags == ("loss", "grad_norm", "learning_rate")
    assert same(
        rows(result),
        [
            ("loss", 10, 1700000000.5, 2.31),
            ("grad_norm", 10, 1700000000.5, 0.8),
            ("learning_rate", 10, 1700000000.5, 3e-4),
            ("loss", 20, NAN, 2.0),
        ],
    )


@pytest.mark.parametrize(
    ("row", "step"),
    [
        ({"step": 1, "global_step": 2, "iteration": 3, "iter": 4, "_step": 5, "x": 0.0}, 1),
        ({"global_step": 2, "iteration": 3, "iter": 4, "_step": 5, "x": 0.0}, 2),
        ({"iteration": 3, "iter": 4, "_step": 5, "x": 0.0}, 3),
        ({"iter": 4, "_step": 5, "x": 0.0}, 4),
        ({"_step": 5, "x": 0.0}, 5),
    ],
)
def test_wide_row_step_key_precedence(row: dict, step: int) -> None:
    result = read(json.dumps([row]))
    assert same(rows(result), [("x", step, NAN, 0.0)])


def test_wide_row_wall_time_keys_in_precedence_order() -> None:
    text = json.dumps(
        [
            {"step": 1, "_timestamp": 2.0, "wall_time": 1.0, "timestamp": 3.0, "x": 0.0},
            {"step": 2, "timestamp": 3.0, "_timestamp": 2.0, "x": 0.0},
            {"step": 3, "timestamp": None, "x": 0.0},
        ]
    )
    assert same(rows(read(text)), [("x", 1, 1.0, 0.0), ("x", 2, 2.0, 0.0), ("x", 3, NAN, 0.0)])


def test_wide_row_nested_objects_flatten_with_slash() -> None:
    text = '[{"step": 1, "train": {"loss": 1.5, "opt": {"lr": 0.1}}, "val/loss": 2}]'
    result = read(text, strict=True)
    assert [(t, v) for t, _, _, v in rows(result)] == [
        ("train/loss", 1.5),
        ("train/opt/lr", 0.1),
        ("val/loss", 2.0),
    ]


def test_wide_row_bad_metric_drops_only_itself() -> None:
    text = (
        '{"step": 1, "loss": 2.5, "acc": true, "name": "epoch_one", "lr": null, "x": [1]}\n'
        '{"step": 2, "nested": {"bad": "abc"}, "loss": 2.0, "": 1}\n'
    )
    result = read(text)
    assert result.problems == [
        problem("value must be a number, got true", 1, "$.acc"),
        problem('value must be a number, got "epoch_one"', 1, "$.name"),
        problem("value must be a number, got null", 1, "$.lr"),
        problem("value must be a number, got a list", 1, "$.x"),
        problem('value must be a number, got "abc"', 2, "$.nested.bad"),
        problem('tag must be a non-empty string, got ""', 2, "$['']"),
    ]
    assert [(t, s, v) for t, s, _, v in rows(result)] == [("loss", 1, 2.5), ("loss", 2, 2.0)]


def test_wide_row_with_bad_step_or_wall_time_is_dropped_whole() -> None:
    text = json.dumps(
        [
            {"step": 1.5, "loss": 1.0},
            {"loss": 1.0, "epoch": 1},
            {"step": 2, "wall_time": "noon", "loss": 1.0},
            {"step": 3, "loss": 0.5},
        ]
    )
    result = read(text)
    assert result.problems == [
        problem("step must be an integer from 0 to 9007199254740991, got 1.5", 1, "$[0].step"),
        problem('missing "step"', 1, "$[1]"),
        problem('wall_time must be a number or null, got "noon"', 1, "$[2].wall_time"),
    ]
    assert same(rows(result), [("loss", 3, NAN, 0.5)])


def test_list_of_wide_rows_locates_bad_values() -> None:
    text = (
        "[\n"  # 1
        '  {"step": 1, "loss": 2.5},\n'  # 2
        '  {"step": 2,\n'  # 3
        '   "loss": "NaNx"},\n'  # 4
        '  {"step": 3, "loss": 2.0}\n'  # 5
        "]"
    )
    result = read(text)
    assert result.problems == [problem('value must be a number, got "NaNx"', 4, "$[1].loss")]
    assert [s for _, s, _, _ in rows(result)] == [1, 3]


def test_wide_rows_name_their_run() -> None:
    text = (
        '{"run": "a", "step": 1, "loss": 1.0}\n'
        '{"step": 1, "loss": 2.0}\n'
        '{"run": "", "step": 2, "loss": 3.0}\n'
    )
    result = read(text, run="stem")
    assert list(result.runs) == ["a", "stem"]
    assert result.problems == [problem('run must be a non-empty string, got ""', 3, "$.run")]


# --- trainer_state.json ------------------------------------------------------------------------

TRAINER_STATE = """{
  "best_metric": null,
  "best_model_checkpoint": null,
  "epoch": 0.32,
  "eval_steps": 500,
  "global_step": 40,
  "is_hyper_param_search": false,
  "is_local_process_zero": true,
  "is_world_process_zero": true,
  "log_history": [
    {
      "epoch": 0.08,
      "grad_norm": 4.123,
      "learning_rate": 4.8e-05,
      "loss": 2.3145,
      "step": 10
    },
    {
      "epoch": 0.16,
      "grad_norm": NaN,
      "learning_rate": 4.6e-05,
      "loss": 2.1,
      "step": 20
    },
    {
      "epoch": 0.16,
      "eval_loss": 2.05,
      "eval_runtime": 1.234,
      "eval_samples_per_second": 81.0,
      "eval_steps_per_second": 10.1,
      "step": 20
    },
    {
      "epoch": 0.24,
      "grad_norm": Infinity,
      "learning_rate": 4.4e-05,
      "loss": LOSS,
      "step": 30
    },
    {
      "epoch": 0.32,
      "step": 40,
      "total_flos": 1204224000000000.0,
      "train_loss": 2.1,
      "train_runtime": 12.5,
      "train_samples_per_second": 25.6,
      "train_steps_per_second": 3.2
    }
  ],
  "logging_steps": 10,
  "max_steps": 40,
  "num_train_epochs": 1,
  "save_steps": 500,
  "total_flos": 1204224000000000.0,
  "train_batch_size": 8,
  "trial_name": null,
  "trial_params": null
}
"""


@pytest.mark.parametrize("fmt", [None, "json", "trainer_state"])
def test_trainer_state_log_history_entries_are_wide_rows(fmt: str | None) -> None:
    result = read(TRAINER_STATE.replace("LOSS", "1.98"), run="checkpoint-40", fmt=fmt)
    assert result.problems == []
    assert list(result.runs) == ["checkpoint-40"]
    got = [(t, s, v) for t, s, _, v in rows(result, "checkpoint-40")]
    assert got[:3] == [
        ("grad_norm", 10, 4.123),
        ("learning_rate", 10, 4.8e-05),
        ("loss", 10, 2.3145),
    ]
    assert got[3][:2] == ("grad_norm", 20) and math.isnan(got[3][2])
    assert got[6:10] == [
        ("eval_loss", 20, 2.05),
        ("eval_samples_per_second", 20, 81.0),
        ("eval_steps_per_second", 20, 10.1),
        ("grad_norm", 30, math.inf),
    ]
    assert got[12:] == [
        ("train_loss", 40, 2.1),
        ("train_samples_per_second", 40, 25.6),
        ("train_steps_per_second", 40, 3.2),
    ]
    assert len(got) == 15


def test_trainer_state_bad_value_has_line_and_path() -> None:
    result = read(TRAINER_STATE.replace("LOSS", '"n/a"'), run="ckpt")
    assert result.problems == [
        problem('value must be a number, got "n/a"', 37, "$.log_history[3].loss")
    ]
    assert len(result.runs["ckpt"]) == 14


def test_forced_trainer_state_needs_log_history() -> None:
    result = read('{"run": "r", "points": []}', fmt="trainer_state")
    assert result.problems == [problem('missing "log_history"', 1, "$")]
    not_a_state = read("[]", fmt="trainer_state")
    assert not_a_state.problems == [problem("expected an object, got a list", 1, "$")]


# --- CSV ---------------------------------------------------------------------------------------

LIGHTNING_CSV = """epoch,step,train_loss,val_acc,val_loss
0,49,2.3012,,
0,99,2.1034,,
0,99,,0.31,2.05
1,149,1.9876,,
1,199,nan,,
1,199,,0.36,1.95
"""


def test_lightning_metrics_csv_empty_cells_are_no_points() -> None:
    result = read(LIGHTNING_CSV, run="version_0")
    assert result.problems == []
    assert result.runs["version_0"].tags == ("train_loss", "val_acc", "val_loss")
    got = [(t, s, v) for t, s, _, v in rows(result, "version_0")]
    assert got[:5] == [
        ("train_loss", 49, 2.3012),
        ("train_loss", 99, 2.1034),
        ("val_acc", 99, 0.31),
        ("val_loss", 99, 2.05),
        ("train_loss", 149, 1.9876),
    ]
    assert got[5][:2] == ("train_loss", 199) and math.isnan(got[5][2])
    assert got[6:] == [("val_acc", 199, 0.36), ("val_loss", 199, 1.95)]
    assert np.isnan(result.runs["version_0"].wall_time).all()


def test_csv_problems_use_real_file_lines() -> None:
    text = (
        "step,loss,note,wall_time\n"  # 1
        "1,2.5,,100\n"  # 2
        "\n"  # 3
        '2,abc,"two\nlines",101\n'  # 4-5
        "-3,1.0,,102\n"  # 6
        "4,1.0\n"  # 7
        "5.0,true,,\n"  # 8
        "6, -Inf ,,x\n"  # 9
        ",1.0,,\n"  # 10
        "7,1.25,,103\n"  # 11
    )
    result = read(text)
    assert result.problems == [
        problem('value must be a number, got "abc"', 4, "$.loss"),
        problem('value must be a number, got "two\\nlines"', 4, "$.note"),
        problem('step must be an integer from 0 to 9007199254740991, got "-3"', 6, "$.step"),
        problem("expected 4 cells, got 2", 7),
        problem('value must be a number, got "true"', 8, "$.loss"),
        problem('wall_time must be a number or null, got "x"', 9, "$.wall_time"),
        problem('missing "step"', 10, "$"),
    ]
    assert same(rows(result), [("loss", 1, 100.0, 2.5), ("loss", 7, 103.0, 1.25)])


def test_csv_header_rules() -> None:
    assert read("epoch,loss\n0,1.0\n", fmt="csv").problems == [problem("no step column", 1)]
    result = read(",step,loss,loss,val/loss\n0,1,2.0,3.0,4.0\n")
    assert result.problems == [problem('duplicate column "loss"', 1)]
    assert [(t, s, v) for t, s, _, v in rows(result)] == [("loss", 1, 2.0), ("val/loss", 1, 4.0)]


def test_csv_bad_value_in_slashed_column_has_bracketed_path() -> None:
    result = read("step,val/loss\n1,oops\n")
    assert result.problems == [problem('value must be a number, got "oops"', 2, "$['val/loss']")]


def test_csv_run_column_names_runs() -> None:
    result = read("run,step,loss\na,1,1.0\n,2,2.0\n", run="stem")
    assert list(result.runs) == ["a", "stem"]


# --- numbers -----------------------------------------------------------------------------------


def test_nan_and_infinity_tokens_and_strings_are_kept_with_sign() -> None:
    values = [
        "NaN", "Infinity", "-Infinity", '"NaN"', '"Infinity"', '"-Infinity"',
        '"inf"', '"-inf"', '"nan"', '"INF"', '"-INFINITY"', '"+inf"', '"Nan"',
    ]  # fmt: skip
    text = "\n".join(f'{{"step": {i}, "tag": "x", "value": {v}}}' for i, v in enumerate(values))
    got = read(text, strict=True).runs["default"].value
    signs = [0, 1, -1, 0, 1, -1, 1, -1, 0, 1, -1, 1, 0]
    for value, sign, raw in zip(got, signs, values):
        if sign == 0:
            assert math.isnan(value), raw
        else:
            assert math.isinf(value) and math.copysign(1, value) == sign, raw


def test_csv_nonfinite_words() -> None:
    got = read("step,x\n1,NaN\n2,inf\n3,-Infinity\n4,-inf\n5,nan\n", strict=True)
    value = got.runs["default"].value
    assert math.isnan(value[0]) and math.isnan(value[4])
    assert value[1] == math.inf and value[2] == -math.inf and value[3] == -math.inf


def test_numeric_strings_and_integers_are_numbers() -> None:
    text = '[{"step": "3", "tag": "x", "value": "2.5e-3"}, {"step": 4.0, "tag": "x", "value": 7}]'
    assert same(rows(read(text, strict=True)), [("x", 3, NAN, 2.5e-3), ("x", 4, NAN, 7.0)])


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("true", "true"),
        ("false", "false"),
        ("null", "null"),
        ('"abc"', '"abc"'),
        ('"1_000"', '"1_000"'),
        ('"0x10"', '"0x10"'),
        ("[1]", "a list"),
        ('{"a": 1}', "an object"),
        ('"' + "x" * 50 + '"', '"' + "x" * 36 + "..."),
    ],
)
def test_value_rejections(raw: str, shown: str) -> None:
    text = f'{{"step": 1, "tag": "x", "value": {raw}}}\n{{"step": 2, "tag": "x", "value": 1.0}}\n'
    result = read(text, fmt="ndjson")
    assert result.problems == [problem(f"value must be a number, got {shown}", 1, "$.value")]
    assert [s for _, s, _, _ in rows(result)] == [2]


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("-3", "-3"),
        ("10.5", "10.5"),
        ("-1.0", "-1.0"),
        ("true", "true"),
        ("null", "null"),
        ('"ten"', '"ten"'),
        ('"10.5"', '"10.5"'),
        ("NaN", "NaN"),
        ("Infinity", "Infinity"),
        ("1e19", "1e+19"),
        ("9223372036854775808", "9223372036854775808"),
    ],
)
def test_step_rejections(raw: str, shown: str) -> None:
    result = read(f'{{"step": {raw}, "tag": "x", "value": 1.0}}\n', fmt="ndjson")
    assert result.problems == [problem(f"step must be an integer from 0 to 9007199254740991, got {shown}", 1, "$.step")]
    assert len(result.runs["default"]) == 0


@pytest.mark.parametrize(
    ("raw", "step"), [("0", 0), ("10.0", 10), ('"12"', 12), ("9007199254740991", 2**53 - 1)]
)
def test_step_acceptance(raw: str, step: int) -> None:
    result = read(f'{{"step": {raw}, "tag": "x", "value": 1.0}}', strict=True)
    assert result.runs["default"].step.tolist() == [step]


def test_point_rejections_report_every_bad_field() -> None:
    text = (
        '{"run": "r", "points": [\n'
        '{"step": 1, "tag": 3, "value": 1.0},\n'
        '{"step": 2, "tag": "", "value": 1.0},\n'
        '{"value": 1.0},\n'
        '{"step": -1, "tag": "x", "value": false, "wall_time": "late"},\n'
        "7,\n"
        '{"step": 5, "tag": "x", "value": 1.0}\n'
        "]}"
    )
    result = read(text)
    assert result.problems == [
        problem("tag must be a non-empty string, got 3", 2, "$.points[0].tag"),
        problem('tag must be a non-empty string, got ""', 3, "$.points[1].tag"),
        problem('missing "step"', 4, "$.points[2]"),
        problem('missing "tag"', 4, "$.points[2]"),
        problem("step must be an integer from 0 to 9007199254740991, got -1", 5, "$.points[3].step"),
        problem("value must be a number, got false", 5, "$.points[3].value"),
        problem('wall_time must be a number or null, got "late"', 5, "$.points[3].wall_time"),
        problem("expected an object, got 7", 6, "$.points[4]"),
    ]
    assert same(rows(result, "r"), [("x", 5, NAN, 1.0)])


def test_bad_run_name_skips_its_document() -> None:
    text = '[{"run": 3, "points": [{"step": 1, "tag": "x", "value": 1.0}]}, {"points": "no"}]'
    result = read(text)
    assert result.problems == [
        problem("run must be a non-empty string, got 3", 1, "$[0].run"),
        problem('points must be a list, got "no"', 1, "$[1].points"),
    ]
    assert list(result.runs) == []


# --- strict and lenient ------------------------------------------------------------------------


def test_strict_raises_with_every_problem_and_lenient_keeps_the_good_points() -> None:
    text = (
        '{"step": 1, "tag": "loss", "value": 2.0}\n'
        '{"step": 2, "tag": "loss", "value": true}\n'
        '{"step": 3, "tag": "loss", "value": 1.5}\n'
        "not json\n"
        '{"step": 5, "tag": "loss", "value": 1.0}\n'
    )
    expected = [
        problem("value must be a number, got true", 2, "$.value"),
        problem("invalid JSON: Expecting value (column 1)", 4),
    ]
    lenient = read(text, fmt="ndjson")
    assert lenient.problems == expected
    assert [s for _, s, _, _ in rows(lenient)] == [1, 3, 5]
    with pytest.raises(IngestError) as raised:
        read(text, fmt="ndjson", strict=True)
    assert raised.value.problems == expected


def test_malformed_json_document_is_a_problem_not_a_traceback() -> None:
    text = '{"run": "r", "points": [\n{"step": 1, "tag": "x", "value": 1.0},\n{"step": 2,, }\n]}'
    assert read(text).problems == [
        problem("invalid JSON: Expecting property name enclosed in double quotes (column 12)", 3)
    ]
    with pytest.raises(IngestError) as raised:
        read(text, strict=True)
    assert str(raised.value) == (
        "log.txt: line 3: invalid JSON: Expecting property name enclosed in double quotes"
        " (column 12)"
    )


def test_undecodable_json_lines_are_problems_too() -> None:
    text = "[" * 5000 + "\n" + '{"step": 1, "v": ' + "1" * 5000 + "}\n" + '{"step": 2, "v": 1.0}\n'
    result = read(text, fmt="ndjson")
    assert result.problems == [
        problem("invalid JSON: nested too deeply", 1),
        problem("invalid JSON: number too long", 2),
    ]
    assert same(rows(result), [("v", 2, NAN, 1.0)])
    assert read("[" * 5000).problems == [problem("invalid JSON: nested too deeply")]


def test_nesting_deeper_than_the_limit_is_a_bad_value() -> None:
    text = '{"step": 1, ' + '"a": {' * 12 + '"x": 1.0' + "}" * 12 + "}"
    result = read(text)
    assert result.problems == [
        problem("value must be a number, got an object", 1, "$" + ".a" * 11)
    ]


def test_invalid_utf8_is_reported_and_the_rest_read() -> None:
    data = b'{"step": 1, "tag": "x", "value": 1.0}\n{"step": 2, "tag": "\xff", "value": 2.0}\n'
    result = read(data)
    assert result.problems == [
        Problem(SOURCE, "invalid UTF-8", offset=58, line=2),
        problem('tag must not contain control characters or invalid UTF-8, got "\\udcff"', 2, "$.tag"),
    ]
    assert same(rows(result), [("x", 1, NAN, 1.0)])


def test_invalid_utf8_in_a_csv_header_drops_that_column_only() -> None:
    result = read(b"step,loss,\xffbad\n1,2.0,3\n")
    assert result.problems == [
        Problem(SOURCE, "invalid UTF-8", offset=10, line=1),
        problem('tag must not contain control characters or invalid UTF-8, got "\\udcffbad"', 2, "$['\\udcffbad']"),
    ]
    assert same(rows(result), [("loss", 1, NAN, 2.0)])


def test_numbers_beyond_float64_are_bad_values_not_infinity() -> None:
    text = '[{"step": 1, "loss": 1e400, "lr": "1e999", "gn": Infinity, "scale": "-inf", "n": -1e309}]'
    result = read(text)
    assert result.problems == [
        problem("value must be a number, got a number beyond float64's range", 1, "$[0].loss"),
        problem('value must be a number, got "1e999"', 1, "$[0].lr"),
        problem("value must be a number, got a number beyond float64's range", 1, "$[0].n"),
    ]
    assert same(rows(result), [("gn", 1, NAN, math.inf), ("scale", 1, NAN, -math.inf)])


def test_overflowing_canonical_point_and_wall_time_are_rejected() -> None:
    text = '{"points": [{"step": 1, "tag": "a", "value": 1e400}, {"step": 2, "tag": "a", "value": 1.0, "wall_time": 1e999}]}'
    result = read(text)
    assert result.problems == [
        problem("value must be a number, got a number beyond float64's range", 1, "$.points[0].value"),
        problem("wall_time must be a number or null, got a number beyond float64's range", 1, "$.points[1].wall_time"),
    ]
    assert rows(result) == []


@pytest.mark.parametrize(
    ("tag", "reason"),
    [
        ("a\x00b", 'tag must not contain control characters or invalid UTF-8, got "a\\u0000b"'),
        ("line\nbreak", 'tag must not contain control characters or invalid UTF-8, got "line\\nbreak"'),
        ("\ud800", 'tag must not contain control characters or invalid UTF-8, got "\\ud800"'),
        ("x" * 1025, f'tag must be at most 1024 characters, got "{"x" * 36}...'),
    ],
)
def test_bad_tag_names_reject_their_point(tag: str, reason: str) -> None:
    text = json.dumps({"points": [{"step": 1, "tag": tag, "value": 1.0}, {"step": 1, "tag": "ok", "value": 2.0}]})
    result = read(text)
    assert result.problems == [problem(reason, 1, "$.points[0].tag")]
    assert same(rows(result), [("ok", 1, NAN, 2.0)])


def test_bad_run_name_skips_its_record() -> None:
    result = read(json.dumps([{"run": "a\u0007", "step": 1, "loss": 1.0}, {"step": 1, "loss": 2.0}]))
    assert result.problems == [problem('run must not contain control characters or invalid UTF-8, got "a\\u0007"', 1, "$[0].run")]
    assert same(rows(result), [("loss", 1, NAN, 2.0)])


def test_steps_beyond_two_to_the_53_are_rejected() -> None:
    result = read(json.dumps([{"step": 2**53, "loss": 1.0}, {"step": 2**53 - 1, "loss": 2.0}]))
    assert result.problems == [problem("step must be an integer from 0 to 9007199254740991, got 9007199254740992", 1, "$[0].step")]
    assert same(rows(result), [("loss", 2**53 - 1, NAN, 2.0)])


def test_utf8_bom_is_ignored() -> None:
    result = read("\ufeffstep,loss\n1,2.0\n".encode(), strict=True)
    assert same(rows(result), [("loss", 1, NAN, 2.0)])


# --- detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "tags"),
    [
        ('{"run": "r", "points": [{"step": 1, "tag": "a", "value": 1}]}', ("a",)),
        ('  \n{"run": "r", "points": [\n{"step": 1, "tag": "a", "value": 1}\n]}', ("a",)),
        ('[{"step": 1, "a": 1},\n {"step": 2, "b": 2}]', ("a", "b")),
        ('{"step": 1, "tag": "a", "value": 1}\n{"step": 2, "tag": "b", "value": 1}', ("a", "b")),
        ('{"step": 1, "a": 1}\n{"step": 2, "b": 1}\n', ("a", "b")),
        ('{"step": 1, "a": 1}\n', ("a",)),
        ('{\n  "log_history": [{"step": 1, "loss": 1}]\n}', ("loss",)),
        ("step,a\n1,1\n", ("a",)),
    ],
)
def test_format_detection(text: str, tags: tuple[str, ...]) -> None:
    result = read(text, strict=True)
    assert next(iter(result.runs.values())).tags == tags


def test_forced_format_overrides_detection() -> None:
    text = '{"step": 1, "tag": "a", "value": 1}'
    assert read(text, fmt="csv").problems == [problem("no step column", 1)]
    assert read(text, fmt="ndjson").runs["default"].tags == ("a",)
    with pytest.raises(ValueError, match="unknown text log format 'xml'"):
        read(text, fmt="xml")


@pytest.mark.parametrize("fmt", [None, "json", "ndjson", "csv", "trainer_state"])
def test_empty_input_is_no_runs(fmt: str | None) -> None:
    result = read(" \n\n", fmt=fmt, strict=True)
    assert result.runs == {} and result.problems == []


def test_many_points_take_the_array_path() -> None:
    points = [{"step": i, "tag": f"t{i % 3}", "value": i / 7} for i in range(20_000)]
    result = read(json.dumps({"run": "big", "points": points}), strict=True)
    run = result.runs["big"]
    assert run.tags == ("t0", "t1", "t2")
    assert run.step.tolist() == list(range(20_000))
    assert run.value.tolist() == [i / 7 for i in range(20_000)]


point_lists = st.lists(
    st.tuples(
        st.text(st.characters(exclude_categories=("Cc", "Cs")), min_size=1, max_size=8),
        st.integers(min_value=0, max_value=2**53 - 1),
        st.one_of(st.none(), st.floats(allow_nan=False)),
        st.floats(),
    ),
    max_size=30,
)


@settings(max_examples=60, deadline=None)
@given(point_lists, st.sampled_from(["json", "ndjson"]))
def test_any_points_round_trip_exactly(points: list[tuple], fmt: str) -> None:
    records = [{"step": s, "tag": t, "value": v, "wall_time": w} for t, s, w, v in points]
    if fmt == "json":
        text = json.dumps({"run": "r", "points": records})
    else:
        text = "\n".join(json.dumps({"run": "r", **record}) for record in records)
    result = read(text, strict=True)
    got = rows(result, "r") if points else []
    expected = [(t, s, math.nan if w is None else w, v) for t, s, w, v in points]
    assert len(got) == len(expected)
    for (t, s, w, v), (et, es, ew, ev) in zip(got, expected):
        assert (t, s) == (et, es)
        assert w == ew or (math.isnan(w) and math.isnan(ew))
        assert v == ev or (math.isnan(v) and math.isnan(ev))
        assert math.isnan(ev) or math.copysign(1, v) == math.copysign(1, ev)  # -0.0 stays
