"""Services that write evaluation sets, their questions and judgements, by hand or imported
from a BEIR collection. The runs over a set are written by `run_services`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import PurePosixPath
from typing import IO, Any

from django.contrib.auth.models import AbstractBaseUser
from django.db import IntegrityError, transaction
from django.db.models import Max

from ragmux.core.audit import audit_change, snapshot
from ragmux.core.errors import Conflict, InvalidInput, LimitReached
from retrieval.evaluation import beir
from retrieval.models import (
    MAX_GRADE,
    EvaluationQuestion,
    EvaluationSet,
    Judgement,
)
from retrieval.serializers import MAX_QUERY_CHARS
from stores.models import Document, RagStore

# How many questions a set holds.
MAX_QUESTIONS_PER_SET = 10_000
# How many unmatched BEIR ids an import names (it counts them all).
UNMATCHED_SHOWN = 20
EXTERNAL_ID_CHARS = EvaluationQuestion._meta.get_field("external_id").max_length
_audit_set = partial(audit_change, object_type="evaluation_set")


def _set_snapshot(evaluation_set: EvaluationSet) -> dict[str, Any]:
    return {**snapshot(evaluation_set, ("store_id", "name")), "questions": evaluation_set.questions.count()}


def _question_snapshot(question: EvaluationQuestion) -> dict[str, Any]:
    grades = question.judgements.order_by("document_id").values_list("document_id", "grade")
    return {"question_id": question.pk, "text": question.text, "judgements": {str(d): g for d, g in grades}}


def _refuse_duplicate_name(store: RagStore, name: str, *, exclude: int | None = None) -> None:
    others = EvaluationSet.objects.filter(store=store, name=name).exclude(pk=exclude)
    if others.exists():
        raise Conflict(f"the store already has an evaluation set named {name!r}", code="duplicate_name")


def _grades(store: RagStore, judgements: Sequence[Mapping[str, int]]) -> dict[int, int]:
    """{document id: grade} of judgements given as [{document_id, grade}], each document one of
    the store's (the last grade given for a document counts)."""
    grades = {item["document_id"]: item.get("grade", 1) for item in judgements}
    known = set(Document.objects.filter(store=store, pk__in=list(grades)).values_list("pk", flat=True))
    unknown = sorted(set(grades) - known)
    if unknown:
        raise InvalidInput(f"document {unknown[0]} is not a document of the store {store.name!r}", field="judgements")
    return grades


def _refuse_too_many_questions(evaluation_set: EvaluationSet, adding: int) -> None:
    if evaluation_set.questions.count() + adding > MAX_QUESTIONS_PER_SET:
        raise LimitReached(f"an evaluation set holds at most {MAX_QUESTIONS_PER_SET} questions")


def _add_questions(evaluation_set: EvaluationSet, questions: Sequence[Mapping[str, Any]]) -> list[EvaluationQuestion]:
    """Adds questions ({text, judgements: [{document_id, grade}], external_id?}) after the set's
    last one."""
    _refuse_too_many_questions(evaluation_set, len(questions))
    grades = [_grades(evaluation_set.store, question.get("judgements", ())) for question in questions]
    last = evaluation_set.questions.aggregate(last=Max("position"))["last"]
    first = 0 if last is None else last + 1
    created = EvaluationQuestion.objects.bulk_create(
        EvaluationQuestion(
            evaluation_set=evaluation_set,
            text=question["text"],
            external_id=question.get("external_id", ""),
            position=first + offset,
        )
        for offset, question in enumerate(questions)
    )
    Judgement.objects.bulk_create(
        Judgement(question=question, document_id=document_id, grade=grade)
        for question, question_grades in zip(created, grades, strict=True)
        for document_id, grade in question_grades.items()
    )
    return created


def _create_set(*, store: RagStore, name: str, actor: AbstractBaseUser | None) -> EvaluationSet:
    _refuse_duplicate_name(store, name)
    try:
        with transaction.atomic():
            return EvaluationSet.objects.create(store=store, name=name, created_by=actor)
    except IntegrityError:
        raise Conflict(f"the store already has an evaluation set named {name!r}", code="duplicate_name") from None


def evaluation_set_create(
    *,
    store: RagStore,
    name: str,
    questions: Sequence[Mapping[str, Any]] = (),
    actor: AbstractBaseUser | None = None,
) -> EvaluationSet:
    """A set of ``questions``: each {text, judgements: [{document_id, grade}]}."""
    with transaction.atomic():
        evaluation_set = _create_set(store=store, name=name, actor=actor)
        _add_questions(evaluation_set, questions)
        _audit_set(evaluation_set, actor=actor, action="evaluation_set.create", after=_set_snapshot(evaluation_set))
    return evaluation_set


@dataclass(frozen=True)
class BeirImport:
    """An imported set and what of the files matched nothing: BEIR corpus ids that name no
    document of the store, and queries not imported: missing from queries.jsonl (``missing_``,
    counted among the unmatched too) or judging no document of the store."""

    evaluation_set: EvaluationSet
    questions: int
    judgements: int
    unmatched_documents: list[str]
    unmatched_documents_total: int
    unmatched_queries: list[str]
    unmatched_queries_total: int
    missing_queries: list[str]
    missing_queries_total: int


def _documents_by_beir_id(store: RagStore) -> dict[str, int]:
    """Each document of the store under the ids a BEIR corpus may name it by: its `source`, and
    its file name's stem (the source wins when a stem is also another document's source)."""
    by_id: dict[str, int] = {}
    rows = Document.objects.filter(store=store).order_by("id").values_list("pk", "source", "filename")
    for document_id, _, filename in rows:
        by_id.setdefault(PurePosixPath(filename).stem, document_id)
    for document_id, source, _ in rows:
        if source:
            by_id[source] = document_id
    return by_id


def uploaded_text(upload: IO[bytes], *, field: str) -> str:
    """An uploaded BEIR file's text (the API's and the dashboard's forms): UTF-8, a byte-order
    mark dropped, and no NUL character (which no text column holds)."""
    try:
        text = upload.read().decode("utf-8-sig")
    except UnicodeDecodeError:
        raise InvalidInput(f"{field}: the file is not UTF-8 text", field=field) from None
    if "\x00" in text:
        raise InvalidInput(f"{field}: the file holds a NUL character", field=field)
    return text


def _parsed(parse, text: str):
    try:
        return parse(text)
    except beir.BeirFormatError as exc:
        raise InvalidInput(str(exc), code="invalid_beir") from None


def _checked_beir_question(query_id: str, text: str, matched: list[dict[str, int]]) -> dict[str, Any]:
    """A question of a BEIR query, refused when it cannot be stored as one."""
    if "\x00" in text or "\x00" in query_id:
        raise InvalidInput(f"{beir.QUERIES_FILE}: query {query_id!r} holds a NUL character")
    if len(query_id) > EXTERNAL_ID_CHARS:
        raise InvalidInput(
            f"{beir.QUERIES_FILE}: query id {query_id[:40]!r}… is longer than {EXTERNAL_ID_CHARS} characters"
        )
    if len(text) > MAX_QUERY_CHARS:
        raise InvalidInput(
            f"{beir.QUERIES_FILE}: query {query_id!r} is {len(text)} characters long, "
            f"more than a question may be ({MAX_QUERY_CHARS})"
        )
    graded_too_high = [item for item in matched if item["grade"] > MAX_GRADE]
    if graded_too_high:
        raise InvalidInput(
            f"{beir.QRELS_FILE}: query {query_id!r} grades a document {graded_too_high[0]['grade']}, "
            f"above the highest grade ({MAX_GRADE})"
        )
    return {"text": text, "external_id": query_id, "judgements": matched}


def _beir_questions(
    queries: Mapping[str, str], qrels: Mapping[str, Mapping[str, int]], documents: Mapping[str, int]
) -> tuple[list[dict[str, Any]], list[str]]:
    """The questions of the judged queries that match a document, and the ids of those that do not."""
    questions, unmatched_queries = [], []
    for query_id, judged in qrels.items():
        matched = [
            {"document_id": documents[corpus_id], "grade": grade}
            for corpus_id, grade in judged.items()
            if grade > 0 and corpus_id in documents
        ]
        if query_id not in queries or not matched:
            unmatched_queries.append(query_id)
            continue
        questions.append(_checked_beir_question(query_id, queries[query_id].strip(), matched))
    return questions, unmatched_queries


def evaluation_set_import_beir(
    *, store: RagStore, name: str, queries_text: str, qrels_text: str, actor: AbstractBaseUser | None = None
) -> BeirImport:
    """A set from a BEIR collection's `queries.jsonl` and `qrels/test.tsv`: one question per query
    the qrels judge, its judged corpus ids matched to the store's documents by `source` or file
    name stem (grades above 0). Refused when nothing matches."""
    queries = _parsed(beir.parse_queries, queries_text)
    qrels = _parsed(beir.parse_qrels, qrels_text)
    documents = _documents_by_beir_id(store)
    judged_ids = sorted({corpus_id for judged in qrels.values() for corpus_id, grade in judged.items() if grade > 0})
    unmatched_documents = [corpus_id for corpus_id in judged_ids if corpus_id not in documents]
    if judged_ids and len(unmatched_documents) == len(judged_ids):
        raise InvalidInput(
            f"none of the {len(judged_ids)} corpus ids judged in qrels/test.tsv names a document of the store "
            f"{store.name!r} by its source or file name stem (for example {judged_ids[0]!r})",
            code="nothing_matched",
        )
    questions, unmatched_queries = _beir_questions(queries, qrels, documents)
    missing_queries = [query_id for query_id in qrels if query_id not in queries]
    if not questions:
        raise InvalidInput(
            "no query of qrels/test.tsv both appears in queries.jsonl and judges a document of the store",
            code="nothing_matched",
        )
    with transaction.atomic():
        evaluation_set = _create_set(store=store, name=name, actor=actor)
        _add_questions(evaluation_set, questions)
        _audit_set(evaluation_set, actor=actor, action="evaluation_set.import", after=_set_snapshot(evaluation_set))
    return BeirImport(
        evaluation_set=evaluation_set,
        questions=len(questions),
        judgements=sum(len(question["judgements"]) for question in questions),
        unmatched_documents=unmatched_documents[:UNMATCHED_SHOWN],
        unmatched_documents_total=len(unmatched_documents),
        unmatched_queries=unmatched_queries[:UNMATCHED_SHOWN],
        unmatched_queries_total=len(unmatched_queries),
        missing_queries=missing_queries[:UNMATCHED_SHOWN],
        missing_queries_total=len(missing_queries),
    )


def evaluation_set_update(
    *, evaluation_set: EvaluationSet, name: str, actor: AbstractBaseUser | None = None
) -> EvaluationSet:
    _refuse_duplicate_name(evaluation_set.store, name, exclude=evaluation_set.pk)
    with transaction.atomic():
        before = _set_snapshot(evaluation_set)
        evaluation_set.name = name
        try:
            with transaction.atomic():
                evaluation_set.save(update_fields=["name", "updated_at"])
        except IntegrityError:
            raise Conflict(f"the store already has an evaluation set named {name!r}", code="duplicate_name") from None
        _audit_set(
            evaluation_set,
            actor=actor,
            action="evaluation_set.update",
            before=before,
            after=_set_snapshot(evaluation_set),
        )
    return evaluation_set


@transaction.atomic
def evaluation_set_delete(*, evaluation_set: EvaluationSet, actor: AbstractBaseUser | None = None) -> None:
    """Deletes the set with its questions and runs; a run in progress stops at its next question."""
    before = _set_snapshot(evaluation_set)
    EvaluationSet.objects.filter(pk=evaluation_set.pk).delete()
    _audit_set(evaluation_set, actor=actor, action="evaluation_set.delete", before=before)


@transaction.atomic
def evaluation_question_add(
    *,
    evaluation_set: EvaluationSet,
    text: str,
    judgements: Sequence[Mapping[str, int]] = (),
    actor: AbstractBaseUser | None = None,
) -> EvaluationQuestion:
    (question,) = _add_questions(evaluation_set, [{"text": text, "judgements": judgements}])
    _audit_set(evaluation_set, actor=actor, action="evaluation_set.question_add", after=_question_snapshot(question))
    return question


@transaction.atomic
def evaluation_question_update(
    *,
    question: EvaluationQuestion,
    text: str | None = None,
    judgements: Sequence[Mapping[str, int]] | None = None,
    actor: AbstractBaseUser | None = None,
) -> EvaluationQuestion:
    """Changes a question's text, or replaces its judgements (whatever is given)."""
    evaluation_set = question.evaluation_set
    before = _question_snapshot(question)
    if text is not None:
        question.text = text
        question.save(update_fields=["text"])
    if judgements is not None:
        grades = _grades(evaluation_set.store, judgements)
        question.judgements.all().delete()
        Judgement.objects.bulk_create(
            Judgement(question=question, document_id=document_id, grade=grade) for document_id, grade in grades.items()
        )
    _audit_set(
        evaluation_set,
        actor=actor,
        action="evaluation_set.question_update",
        before=before,
        after=_question_snapshot(question),
    )
    return question


@transaction.atomic
def evaluation_question_delete(*, question: EvaluationQuestion, actor: AbstractBaseUser | None = None) -> None:
    before = _question_snapshot(question)
    EvaluationQuestion.objects.filter(pk=question.pk).delete()
    _audit_set(question.evaluation_set, actor=actor, action="evaluation_set.question_delete", before=before)
