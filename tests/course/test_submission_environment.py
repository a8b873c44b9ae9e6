"""The environment a checked notebook's kernel gets: what the lessons need (threads that sleep when idle), nothing of
the teacher's own (issue 37's threads under contention; issue 36's sandbox keeps secrets out)."""

from __future__ import annotations

from course.grading.checker import submission_environment


def test_idle_openmp_threads_sleep_unless_the_teacher_chose_otherwise(tmp_path, monkeypatch):
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert submission_environment(tmp_path, "token")["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    monkeypatch.setenv("GOMP_SPINCOUNT", "1000")
    env = submission_environment(tmp_path, "token")
    assert (env["OMP_WAIT_POLICY"], env["GOMP_SPINCOUNT"]) == ("ACTIVE", "1000")


def test_the_teachers_secrets_are_not_passed_on(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    env = submission_environment(tmp_path, "token")
    assert "GITHUB_TOKEN" not in env and env["OMP_NUM_THREADS"] == "1"
