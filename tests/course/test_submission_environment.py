"""The environment a checked notebook's kernel gets: the teacher's thread settings, nothing else of the teacher's own
(issue 37's threads under contention; issue 36's sandbox keeps secrets out)."""

from __future__ import annotations

from course.grading.checker import submission_environment


def test_openmps_wait_is_the_teachers_choice_or_its_default(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    monkeypatch.delenv("GOMP_SPINCOUNT", raising=False)
    # No default of the course's own: a forced PASSIVE made idle 2-thread runs 1.3-3x slower (RESULTS.md).
    assert "OMP_WAIT_POLICY" not in submission_environment(tmp_path, "token")
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    env = submission_environment(tmp_path, "token")
    assert (env["OMP_WAIT_POLICY"], env["GOMP_SPINCOUNT"]) == ("ACTIVE", "1000")


def test_the_teachers_secrets_are_not_passed_on(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    env = submission_environment(tmp_path, "token")
    assert "GITHUB_TOKEN" not in env and env["OMP_NUM_THREADS"] == "1"
