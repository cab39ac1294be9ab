"""Evaluation runs through real worker processes (`ragmux worker`: the ingestion node and the
evaluation node beside it) and the real scheduler."""

import os
import signal
import threading

import pytest

from ingestion.services import IncomingFile, document_upload
from ragmux.celery import app
from retrieval.evaluation import run_services
from retrieval.models import EvaluationRun
from stores.models import Document
from tests.helpers import wait_until, worker_pid_of

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]


def start_run(evaluation_set, overrides: dict) -> EvaluationRun:
    """A run queued as the API queues one: sent to the evaluation queue once committed."""
    (run,) = run_services.evaluation_runs_start(
        evaluation_set=evaluation_set, configs=[{"label": "A", "overrides": overrides}]
    )
    return run


def fresh(run: EvaluationRun) -> EvaluationRun:
    return EvaluationRun.objects.get(pk=run.pk)


def test_a_run_goes_on_its_own_worker_with_progress_while_ingestion_carries_on(
    processes, evaluation_set, fake_upstream
):
    texts = list(evaluation_set.questions.values_list("text", flat=True))
    may_answer = {text: threading.Event() for text in texts}

    def hold_each_question(request):
        # Each question's embedding waits for the test's word: the run is stopped mid-way.
        for text in set(texts) & set(request.json().get("input", [])):
            assert may_answer[text].wait(timeout=120)

    fake_upstream.on_request = hold_each_question
    processes.start("worker")
    run = start_run(evaluation_set, {"mode": "vector"})
    wait_until(lambda: fresh(run).status == "running", message="the run to start")

    # The evaluation node is busy with the run: a document uploaded now is still ingested.
    (document,) = document_upload(
        store=evaluation_set.store, files=[IncomingFile("late.md", b"# Late\n\nA document uploaded mid-run.")]
    ).documents
    wait_until(lambda: Document.objects.get(pk=document.pk).status == "ready", message="the upload to be ingested")
    for done, text in enumerate(texts):
        current = fresh(run)
        assert (current.status, current.questions_done, current.questions_total) == ("running", done, 3)
        may_answer[text].set()
        wait_until(lambda done=done: fresh(run).questions_done == done + 1, message=f"question {done + 1}")
    wait_until(lambda: fresh(run).status == "done", message="the run to finish")
    assert fresh(run).summary["questions"] == 3

    queues = app.control.inspect(timeout=5).active_queues() or {}
    served = {node.partition("@")[0]: sorted(queue["name"] for queue in names) for node, names in queues.items()}
    assert served == {"ragmux": ["celery"], "ragmux-evaluation": ["evaluation"]}


def test_a_run_whose_worker_is_killed_is_put_back_and_finished(processes, evaluation_set, fake_upstream):
    killed = threading.Event()
    # Read here: the fake upstream's thread must not open a database connection of its own.
    texts = set(evaluation_set.questions.values_list("text", flat=True))

    def kill_the_evaluation_worker_once(request):
        asks_a_question = request.route == "openai.embeddings" and texts & set(request.json()["input"])
        if asks_a_question and not killed.is_set():
            killed.set()
            os.kill(worker_pid_of(request, fake_upstream), signal.SIGKILL)

    fake_upstream.on_request = kill_the_evaluation_worker_once
    processes.start("worker")
    processes.start("scheduler")
    run = start_run(evaluation_set, {"mode": "vector"})

    wait_until(lambda: fresh(run).status in ("done", "failed"), timeout=120, message="the run to end")
    run = fresh(run)
    assert killed.is_set()
    assert (run.status, run.attempts, run.questions_done, run.error) == ("done", 2, 3, "")


def test_a_run_past_its_time_limit_is_failed_with_the_reason(processes, evaluation_set, fake_upstream):
    processes.env["EVALUATION_RUN_TIME_LIMIT"] = "1s"
    fake_upstream.configure("openai.embeddings", latency=1.5)
    processes.start("worker")
    run = start_run(evaluation_set, {"mode": "vector"})

    wait_until(lambda: fresh(run).status in ("done", "failed"), message="the run to end")
    run = fresh(run)
    assert (run.status, run.questions_done) == ("failed", 1)
    assert run.error == "the run took longer than EVALUATION_RUN_TIME_LIMIT (1s) and was stopped after 1 of 3 questions"


def test_a_worker_stopped_mid_run_gives_the_run_back_unspent(processes, evaluation_set, fake_upstream, tmp_path):
    output = tmp_path / "worker.log"
    worker = processes.start("worker", output=output)
    texts = set(evaluation_set.questions.values_list("text", flat=True))
    stop_sent = threading.Event()

    def stop_the_worker_mid_run(request):
        if request.route != "openai.embeddings" or not texts & set(request.json()["input"]) or stop_sent.is_set():
            return
        stop_sent.set()
        worker.send_signal(signal.SIGTERM)  # as Ctrl-C or `docker stop` would
        # Answer only once the stop has reached the Celery processes: the run is then still in hand.
        wait_until(lambda: "Warm shutdown" in output.read_text(), timeout=30, message="the warm shutdown")

    fake_upstream.on_request = stop_the_worker_mid_run
    run = start_run(evaluation_set, {"mode": "vector"})
    assert worker.wait(timeout=60) == 0
    assert stop_sent.is_set()
    stopped = fresh(run)
    assert (stopped.status, stopped.attempts, stopped.questions_done, stopped.claimed_by) == ("queued", 0, 1, "")
    log = output.read_text()
    assert "put back in the queue" in log
    assert "WorkerLostError" not in log and "Traceback" not in log, log

    fake_upstream.on_request = None
    processes.start("worker")
    wait_until(lambda: fresh(run).status == "done", message="the run to be finished by the next worker")
    assert (fresh(run).attempts, fresh(run).questions_done) == (1, 3)
