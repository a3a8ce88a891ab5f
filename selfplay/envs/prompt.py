"""The policy's prompt: the task as the policy sees it, built from the public view only."""

from __future__ import annotations

from .types import PublicView

POLICY_SYSTEM = (
    "You answer questions using only the evidence packet provided. Cite documents by their ids. "
    "If the evidence does not allow the requested conclusion, say so and explain why."
)

POLICY_USER = "Evidence packet:\n{evidence}\n\nQuestion: {question}"


def format_evidence(public: PublicView) -> str:
    return "\n\n".join(f"[{doc.doc_id}] {doc.text}" for doc in public.evidence)


def policy_messages(public: PublicView) -> list[dict[str, str]]:
    """Chat messages for the policy; render them with `backend.render`."""
    return [
        {"role": "system", "content": POLICY_SYSTEM},
        {"role": "user", "content": POLICY_USER.format(evidence=format_evidence(public), question=public.question)},
    ]
