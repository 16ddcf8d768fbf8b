import inspect
import logging
import signal
import threading
import time

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from v05.tasks import verify
from v05.tasks.base import Prompt
from v05.tasks.verify import ScoreFaults, call_with_timeout, extract_answer, finite_reward, guard_score, score_batch

P = Prompt("t:1", "1+1", "2")


@pytest.mark.parametrize(
    ("text", "style", "expected"),
    [
        ("<answer>292</answer>", "auto", "292"),
        ("<answer>1</answer> then <answer> 292 </answer>", "auto", "292"),  # the last pair wins
        ("<answer>\n\\boxed{7}\n</answer>", "auto", "7"),  # a box inside the tag is unwrapped
        ("<answer>\n\\boxed{7}\n</answer>", "tag", "\\boxed{7}"),
        ("<answer>  </answer>\n5", "auto", None),  # an empty tag does not fall back to plain
        ("<answer>5", "auto", "<answer>5"),  # unclosed tag: plain
        ("so \\boxed{\\frac{1}{2}}.", "auto", "\\frac{1}{2}"),  # nested braces stay balanced
        ("\\boxed{1} and \\boxed{ {2}+{3} }", "boxed", "{2}+{3}"),  # the last box
        ("\\boxed{\\frac{1}{2}", "boxed", None),  # unbalanced
        ("\\boxed{\\frac{1}{2}", "auto", "\\boxed{\\frac{1}{2}"),  # ... so auto falls back to plain
        ("\\boxed{ 3 \\boxed{4}", "boxed", "4"),  # the outer box never closes; the inner one does
        ("}} \\boxed {9}", "boxed", "9"),  # stray closing braces are ignored
        ("\\boxed{}", "boxed", None),
        ("  -224\n+1", "auto", "-224"),
        ("  -224\n+1", "plain", "-224"),
        ("\n\n 12 \n", "plain", "12"),
        ("<answer>3</answer>", "plain", "<answer>3</answer>"),
        ("no tag", "tag", None),
        ("no box", "boxed", None),
        ("", "auto", None),
        ("   \n  ", "auto", None),
    ],
)
def test_extract_answer_cases(text, style, expected):
    """Tags, nested boxes and first lines are extracted as documented; empty answers are None."""
    assert extract_answer(text, style=style) == expected


def test_extract_answer_rejects_unknown_style_and_non_text():
    """An unknown style is a ValueError; a non-string rollout extracts nothing."""
    with pytest.raises(ValueError, match="style"):
        extract_answer("1", style="xml")  # type: ignore[arg-type]
    assert extract_answer(None) is None  # type: ignore[arg-type]


@given(st.text(), st.sampled_from(["auto", "tag", "boxed", "plain"]))
def test_extract_answer_never_raises_and_strips(text, style):
    """On any text, extraction returns None or a non-empty stripped string that occurs in the text."""
    answer = extract_answer(text, style=style)
    assert answer is None or (answer == answer.strip() and answer and answer in text)


@given(st.text().filter(lambda s: "<answer>" not in s and "</answer>" not in s and "\\boxed" not in s), st.text())
def test_tag_extraction_ignores_text_before_the_tag(content, prefix):
    """Metamorphic: whatever precedes the last tag pair (without its closing tag) does not change the answer."""
    prefix = prefix.replace("</answer>", "")
    expected = content.strip() or None
    assert extract_answer(f"<answer>{content}</answer>") == expected
    assert extract_answer(f"{prefix}<answer>{content}</answer>") == expected


def test_call_with_timeout_returns_and_restores_the_handler():
    """A quick call returns its value and leaves the SIGALRM handler and timer as they were."""
    before = signal.getsignal(signal.SIGALRM)
    assert call_with_timeout(divmod, 7, 2, timeout_s=1.0) == (3, 1)
    assert signal.getsignal(signal.SIGALRM) is before
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert call_with_timeout(divmod, 7, 2, timeout_s=None) == (3, 1)


@pytest.mark.parametrize("kind", ["sleep", "busy", "swallow"])
def test_call_with_timeout_stops_pure_python_hangs(kind):
    """Sleeping, busy-looping and `except Exception`-guarded hangs all raise TimeoutError within timeout + 0.5 s."""

    def hang():
        if kind == "sleep":
            time.sleep(60)
        while True:
            try:
                while True:
                    pass
            except Exception:  # a verifier that swallows errors must not swallow the timeout
                if kind == "swallow":
                    continue
                raise

    start = time.monotonic()
    with pytest.raises(TimeoutError, match="0.3 s"):
        call_with_timeout(hang, timeout_s=0.3)
    assert time.monotonic() - start < 0.3 + 0.5
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_call_with_timeout_keeps_an_outer_timer():
    """A running outer timer survives a quick call with its remaining time (10 s - ~0 s > 9 s)."""
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: None)
    try:
        signal.setitimer(signal.ITIMER_REAL, 10.0)
        assert call_with_timeout(abs, -1, timeout_s=1.0) == 1
        assert 9.0 < signal.getitimer(signal.ITIMER_REAL)[0] <= 10.0
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_call_with_timeout_honours_an_earlier_outer_deadline():
    """An outer timer due before this call's timeout cuts the call at that deadline, then fires the outer handler."""
    fired = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    try:
        signal.setitimer(signal.ITIMER_REAL, 0.05)
        start = time.monotonic()
        with pytest.raises(TimeoutError):
            call_with_timeout(time.sleep, 5.0, timeout_s=1.0)
        assert time.monotonic() - start < 0.05 + 0.5
        time.sleep(0.01)
        assert fired == [signal.SIGALRM]
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_nested_calls_time_out_at_the_outer_deadline():
    """call_with_timeout inside call_with_timeout: the outer 0.2 s deadline wins over the inner 5 s one."""
    start = time.monotonic()
    with pytest.raises(TimeoutError):
        call_with_timeout(lambda: call_with_timeout(time.sleep, 5.0, timeout_s=5.0), timeout_s=0.2)
    assert time.monotonic() - start < 0.2 + 0.5
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_call_with_timeout_outside_the_main_thread_runs_untimed_and_warns_once(monkeypatch, caplog):
    """Off the main thread there is no timer: the call runs and one warning is logged for all calls."""
    monkeypatch.setattr(verify, "_warned_off_main_thread", False)
    results = []

    def worker():
        results.extend(call_with_timeout(abs, -3, timeout_s=0.1) for _ in range(3))

    with caplog.at_level(logging.WARNING, logger="v05.tasks.verify"):
        thread = threading.Thread(target=worker)
        thread.start()
        thread.join()
    assert results == [3, 3, 3]
    assert sum("main thread" in r.getMessage() for r in caplog.records) == 1


@pytest.mark.parametrize("bad", [0, -1.0, float("nan"), float("inf")])
def test_call_with_timeout_rejects_bad_timeouts(bad):
    """A timeout must be a positive finite number or None."""
    with pytest.raises(ValueError, match="timeout_s"):
        call_with_timeout(abs, 1, timeout_s=bad)


def test_score_batch_maps_each_failure_to_zero_and_its_flag():
    """Reward / None / raise / hang / out-of-range results land in rewards, no_answer, errors, timeouts, errors."""

    def verifier(prompt, answer):
        if answer == "raise":
            raise KeyError("boom")
        if answer == "hang":
            while True:
                pass
        return {"good": True, "half": 0.5, "unparseable": None, "big": 2.0, "nan": float("nan")}[answer]

    completions = ["good", "half", "unparseable", "raise", "hang", "big", "nan", "  "]
    start = time.monotonic()
    scores = score_batch(verifier, [P] * len(completions), completions, timeout_s=0.2)
    assert time.monotonic() - start < 0.2 + 0.5
    np.testing.assert_array_equal(scores.rewards, [1.0, 0.5, 0, 0, 0, 0, 0, 0])
    np.testing.assert_array_equal(scores.no_answer, [0, 0, 1, 0, 0, 0, 0, 1])
    np.testing.assert_array_equal(scores.errors, [0, 0, 0, 1, 0, 1, 1, 0])
    np.testing.assert_array_equal(scores.timeouts, [0, 0, 0, 0, 1, 0, 0, 0])
    assert scores.failures == 4 and len(scores) == 8 and scores.extracted[-1] is None
    assert scores.rewards.dtype == np.float64 and scores.errors.dtype == np.bool_


def test_score_batch_checks_lengths():
    """One prompt per rollout: unequal lengths are a ValueError."""
    with pytest.raises(ValueError, match="equal lengths"):
        score_batch(lambda p, a: 1.0, [P], ["1", "2"], timeout_s=None)


def test_guard_score_maps_each_fault_to_zero_and_counts_it(caplog):
    """A raise, a 2 s hang (timeout 0.2 s), and non-finite or non-numeric results (NaN, inf, None, a string, a list)
    all give 0.0 and one count of their kind; finite numbers (bools and numpy scalars too) pass through as floats,
    ±1 rewards included; each fault is logged at DEBUG; the timer is left off."""

    def scorer(kind, *, scale=1.0):
        if kind == "raise":
            raise KeyError("boom")
        if kind == "hang":
            time.sleep(2.0)
        return {"one": scale, "neg": -1, "true": True, "np": np.float32(0.25), "nan": float("nan"),
                "inf": float("inf"), "none": None, "str": "1", "list": [1.0]}[kind]  # fmt: skip

    guarded = guard_score(scorer, timeout_s=0.2)
    start = time.monotonic()
    with caplog.at_level(logging.DEBUG, logger="v05.tasks.verify"):
        got = [guarded(k) for k in ("one", "neg", "true", "np", "raise", "hang", "nan", "inf", "none", "str", "list")]
    assert time.monotonic() - start < 0.2 + 0.5
    assert got == [1.0, -1.0, 1.0, 0.25, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0]
    assert all(type(r) is float for r in got)
    assert (guarded.faults.errors, guarded.faults.timeouts, guarded.faults.garbage) == (1, 1, 5)
    assert guarded.faults.total == 7
    assert sum(r.levelno == logging.DEBUG and "scorer scorer" in r.getMessage() for r in caplog.records) == 7
    assert guarded("one", scale=0.5) == 0.5  # keyword arguments pass through
    assert guarded.score("raise") == (0.0, "error") and guarded.score("one") == (1.0, None)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_guard_score_keeps_the_name_and_signature_and_shares_counts():
    """The wrapper looks like the scorer (name, signature); scorers built with one ScoreFaults count into it; reset
    zeroes it. A timeout of None never times out; a non-positive one is refused at construction."""

    def compute_score(data_source, solution_str, ground_truth, extra_info=None):
        return float(solution_str == ground_truth)

    faults = ScoreFaults()
    a = guard_score(compute_score, timeout_s=1.0, faults=faults)
    b = guard_score(lambda: 1 / 0, timeout_s=None, faults=faults)
    assert a.__name__ == "compute_score"
    assert list(inspect.signature(a).parameters) == ["data_source", "solution_str", "ground_truth", "extra_info"]
    assert a("d", "7", "7") == 1.0 and a("d", "7") == 0.0 and b() == 0.0  # a missing argument is an error too
    assert (faults.errors, faults.timeouts, faults.garbage) == (2, 0, 0)
    faults.reset()
    assert faults.total == 0
    for bad in (0, -1.0, float("nan"), float("inf"), True):
        with pytest.raises(ValueError, match="timeout_s"):
            guard_score(compute_score, timeout_s=bad)


def test_guard_score_lets_interrupts_and_outer_deadlines_through():
    """KeyboardInterrupt is not a scorer fault, and an outer call_with_timeout's deadline still fires."""

    def interrupt():
        raise KeyboardInterrupt

    guarded = guard_score(interrupt, timeout_s=1.0)
    with pytest.raises(KeyboardInterrupt):
        guarded()
    assert guarded.faults.total == 0
    slow = guard_score(time.sleep, timeout_s=5.0)
    with pytest.raises(TimeoutError):
        call_with_timeout(slow, 5.0, timeout_s=0.2)
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)


def test_guard_score_counts_are_thread_safe():
    """Off the main thread (no timer) faults are still zero rewards; 4 threads × 500 raising calls count 2000."""
    guarded = guard_score(lambda: 1 / 0, timeout_s=None)

    def worker():
        for _ in range(500):
            assert guarded() == 0.0

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert guarded.faults.errors == 2000


@pytest.mark.parametrize(
    ("value", "expected"),
    [(1, 1.0), (False, 0.0), (np.int64(3), 3.0), (np.float64(-0.5), -0.5), (float("nan"), None),
     (float("-inf"), None), (10**400, None), (None, None), ("0.5", None), (np.array([1.0]), None)],
)  # fmt: skip
def test_finite_reward(value, expected):
    """Finite real numbers become floats; NaN, ±inf, ints too large for a float and non-numbers become None."""
    assert finite_reward(value) == expected
