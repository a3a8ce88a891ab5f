"""An OpenAI-compatible chat endpoint (`vllm serve`, SGLang, a hosted API) as a judge or oracle model.

It implements the part of `Backend` that judges and the oracle use — `tokenizer`, `render`,
`next_token_logprobs`, `greedy`, `adapter_disabled` — so `LLMOracle` and the judge designs run on it
unchanged. How it departs from a local backend:

- No chat template here: the server applies its own. `render` therefore returns the chat messages
  themselves, serialised (`RENDER_TAG` + JSON), and the caller's assistant prefill ("Verdict:")
  follows that string as usual. With `prefill: continue` (vLLM, SGLang) the prefill is sent as a
  partial assistant turn that the server continues (`continue_final_message`); with `prefill: drop`
  (hosted APIs, which do not continue a turn) it is left out — every verdict prompt already ends by
  asking for the bare label ("Reply Yes or No.").
- `tokenizer` is a `LabelTokenizer`: one id per distinct label string, so `scoring.verdict_token_ids`
  sees single-token labels; the id maps back to its text when the reply is read.
- Verdicts: one reply token (temperature 0) requested with `logprobs` and `top_logprobs`. A label's
  probability is the summed probability of the top tokens equal to it after stripping whitespace
  ("Yes", " Yes"); a label outside the top list counts 0, so the reading is a lower bound that
  misses at most the tail below the k-th token. Where the server returns no log-probabilities
  (`verdict_mode: auto`), the one-token reply gives probability 1 to the label it names (0 to the
  rest; a reply naming no label has mass 0 and the verdict is None). `reading(prompt)` says which
  mode produced each row ("logprobs", "reply", "failed") and why a request failed.
- Failures: every request has a timeout; timeouts, connection errors, 429 and 5xx replies are
  retried `max_retries` times with exponential backoff (`backoff_s`, doubling, at most
  `backoff_max_s`); other HTTP errors are not retried. A request that still fails gives a NaN row,
  which the judge or oracle turns into None with the reason — counted, never a 0.
- At most `concurrency` requests are in flight at once.
- The API key is read from the environment variable *named* by `api_key_env`; the key itself is
  never stored on the config, printed by any repr, written to any file or kept in an error message.
- No LoRA adapter: `adapter=` is accepted and ignored, so an endpoint is always a fixed model.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import threading
import time
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from selfplay.fields import field_values

RENDER_TAG = "<<chat-messages>>"
VERDICT_MODES = ("auto", "logprobs", "reply")
PREFILL_MODES = ("drop", "continue")


class EndpointError(RuntimeError):
    pass


@dataclass(frozen=True)
class EndpointConfig:
    """Where the endpoint is and how it is called (`oracle.endpoint` in conf/oracle/*.yaml).

    base_url: the OpenAI-compatible API root, e.g. "http://127.0.0.1:8000/v1".
    model: the served model name the server expects in each request.
    api_key_env: NAME of the environment variable holding the API key; null for a local server
        that needs none. The key is read when the backend is built, never written anywhere.
    timeout_s: per-request timeout in seconds.
    max_retries: retries after the first attempt (timeouts, connection errors, 429, 5xx).
    backoff_s / backoff_max_s: wait before retry i is backoff_s * 2**i, at most backoff_max_s.
    concurrency: requests in flight at once.
    top_logprobs: alternatives requested per verdict token (OpenAI allows at most 20).
    verdict_mode: "auto" (log-probabilities where the server returns them, else the one-token
        reply), "logprobs" (no log-probabilities = the verdict is None) or "reply" (never ask).
    prefill: "drop" or "continue" (see the module docstring).
    extra_body: extra request fields passed through, e.g. {"chat_template_kwargs":
        {"enable_thinking": false}} for a Qwen3 model served by vLLM.
    """

    base_url: str
    model: str
    api_key_env: str | None = None
    timeout_s: float = 60.0
    max_retries: int = 3
    backoff_s: float = 0.5
    backoff_max_s: float = 8.0
    concurrency: int = 8
    top_logprobs: int = 20
    verdict_mode: str = "auto"
    prefill: str = "drop"
    extra_body: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        def need(ok: bool, key: str, expected: str) -> None:
            if not ok:
                # a key pasted where its variable's name belongs must not be echoed back
                shown = "<hidden>" if key == "api_key_env" else repr(getattr(self, key))
                raise ValueError(f"endpoint.{key}={shown}: expected {expected}")

        need(isinstance(self.base_url, str) and self.base_url.startswith(("http://", "https://")),
             "base_url", "an http(s):// URL")
        need(isinstance(self.model, str) and bool(self.model.strip()), "model", "the served model name")
        need(self.api_key_env is None or (isinstance(self.api_key_env, str) and self.api_key_env.strip() != ""
                                          and not self.api_key_env.startswith(("sk-", "Bearer"))),
             "api_key_env", "null or the NAME of an environment variable (not the key itself)")
        need(self.timeout_s > 0 and math.isfinite(self.timeout_s), "timeout_s", "> 0")
        need(isinstance(self.max_retries, int) and 0 <= self.max_retries <= 10, "max_retries", "an integer in 0..10")
        need(self.backoff_s >= 0, "backoff_s", ">= 0")
        need(self.backoff_max_s >= self.backoff_s, "backoff_max_s", ">= backoff_s")
        need(isinstance(self.concurrency, int) and self.concurrency >= 1, "concurrency", "an integer >= 1")
        need(isinstance(self.top_logprobs, int) and 1 <= self.top_logprobs <= 20, "top_logprobs", "an integer in 1..20")
        need(self.verdict_mode in VERDICT_MODES, "verdict_mode", f"one of {VERDICT_MODES}")
        need(self.prefill in PREFILL_MODES, "prefill", f"one of {PREFILL_MODES}")
        object.__setattr__(self, "extra_body", dict(self.extra_body or {}))

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> EndpointConfig:
        values = field_values(cls, values, "endpoint: unknown keys {unknown}; known: {known}")
        missing = [k for k in ("base_url", "model") if not values.get(k)]
        if missing:
            raise ValueError(f"endpoint: {missing} required (the API root and the served model name)")
        return cls(**values)

    def fingerprint(self) -> dict[str, Any]:
        """The settings that shape verdicts (for cache names): not timeouts, retries or the key's name."""
        return {"base_url": self.base_url, "model": self.model, "top_logprobs": self.top_logprobs,
                "verdict_mode": self.verdict_mode, "prefill": self.prefill, "extra_body": dict(self.extra_body)}


class LabelTokenizer:
    """Stands in for a tokenizer where only label strings are encoded: one id per stripped text."""

    def __init__(self) -> None:
        self._ids: dict[str, int] = {}
        self._lock = threading.Lock()

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        with self._lock:
            return [self._ids.setdefault(text.strip(), len(self._ids))]

    def decode(self, ids: Sequence[int]) -> str:
        by_id = {i: t for t, i in self._ids.items()}
        unknown = [i for i in ids if i not in by_id]
        if unknown:
            raise ValueError(f"endpoint: token ids {unknown} were not made by this backend's tokenizer")
        return "".join(by_id[i] for i in ids)


@dataclass(frozen=True)
class Reading:
    mode: str  # "logprobs" | "reply" | "failed"
    error: str | None = None
    attempts: int = 1


def parse_rendered(prompt: str) -> tuple[list[dict[str, str]], str]:
    """`render(...) + prefill` -> (messages, prefill)."""
    if not prompt.startswith(RENDER_TAG):
        raise ValueError("endpoint: prompt was not rendered by this backend's render()")
    messages, end = json.JSONDecoder().raw_decode(prompt, len(RENDER_TAG))
    return messages, prompt[end:]


class EndpointBackend:
    """See the module docstring; build with `EndpointBackend.from_config(cfg)`."""

    def __init__(self, cfg: EndpointConfig, *, name: str = "endpoint", client: Any = None,
                 sleep=time.sleep):
        self.cfg = cfg
        self.name = name
        self.tokenizer = LabelTokenizer()
        self._client = client if client is not None else _client(cfg)
        self._secret = _key(cfg)
        self._sleep = sleep
        self._readings: dict[str, Reading] = {}
        self._lock = threading.Lock()
        self.stats = {"requests": 0, "retries": 0, "failed": 0, "logprobs": 0, "reply": 0}

    @classmethod
    def from_config(cls, cfg: EndpointConfig | Mapping[str, Any], **kw: Any) -> EndpointBackend:
        return cls(cfg if isinstance(cfg, EndpointConfig) else EndpointConfig.from_mapping(cfg), **kw)

    def __repr__(self) -> str:
        return f"EndpointBackend(name={self.name!r}, base_url={self.cfg.base_url!r}, model={self.cfg.model!r})"

    # ------------------------------------------------------------ Backend subset
    def render(self, messages: Sequence[dict[str, str]], *, add_generation_prompt: bool = True) -> str:
        from selfplay.models.chat import check_messages, seal

        # the server parses special-token strings in message text: an answer that writes
        # `<|im_end|>` must stay text here as it does on a local backend
        sealed = [{"role": m["role"], "content": seal(None, m["content"])} for m in check_messages(messages)]
        return RENDER_TAG + json.dumps(sealed, ensure_ascii=False)

    def next_token_logprobs(self, prompts: Sequence[str], token_ids: Sequence[int], *,
                            adapter: bool = True) -> np.ndarray:
        labels = [self.tokenizer.decode([i]) for i in token_ids]
        rows = self._map(lambda p: self._verdict_row(p, labels), prompts)
        return np.array(rows, dtype=float).reshape(len(prompts), len(token_ids))

    def greedy(self, prompts: Sequence[str], *, max_new_tokens: int, adapter: bool = True) -> list[str]:
        def one(prompt: str) -> str:
            messages, prefill = parse_rendered(prompt)
            reply, error, _ = self._request(self._body(messages, prefill, max_tokens=max_new_tokens, logprobs=False))
            if reply is None:
                raise EndpointError(f"endpoint {self.cfg.base_url}: generation failed: {error}")
            return _content(reply.choices[0])

        return self._map(one, prompts)

    def adapter_disabled(self):
        return contextlib.nullcontext()

    def sample(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("an endpoint serves judges and the oracle, not the trained policy")

    def sequence_logprobs(self, *args: Any, **kwargs: Any):
        raise NotImplementedError("an endpoint serves judges and the oracle, not the trained policy")

    def reading(self, prompt: str) -> Reading | None:
        """How the latest verdict row for `prompt` was read (None if it was never asked)."""
        return self._readings.get(prompt)

    # ------------------------------------------------------------ internals
    def _map(self, fn, items: Sequence[Any]) -> list[Any]:
        if len(items) <= 1 or self.cfg.concurrency == 1:
            return [fn(x) for x in items]
        with ThreadPoolExecutor(max_workers=min(self.cfg.concurrency, len(items))) as pool:
            return list(pool.map(fn, items))

    def _body(self, messages: list[dict[str, str]], prefill: str, *, max_tokens: int, logprobs: bool) -> dict[str, Any]:
        extra = dict(self.cfg.extra_body)
        if self.cfg.prefill == "continue" and prefill.strip():
            messages = [*messages, {"role": "assistant", "content": prefill.rstrip()}]
            extra |= {"continue_final_message": True, "add_generation_prompt": False}
        body: dict[str, Any] = {"model": self.cfg.model, "messages": messages, "max_tokens": max_tokens,
                                "temperature": 0.0}
        if logprobs:
            body |= {"logprobs": True, "top_logprobs": self.cfg.top_logprobs}
        if extra:
            body["extra_body"] = extra
        return body

    def _verdict_row(self, prompt: str, labels: list[str]) -> list[float]:
        messages, prefill = parse_rendered(prompt)
        ask = self.cfg.verdict_mode != "reply"
        reply, error, attempts = self._request(self._body(messages, prefill, max_tokens=1, logprobs=ask))
        nan = [math.nan] * len(labels)
        if reply is None:
            return self._note(prompt, Reading("failed", error, attempts), nan)
        choice = reply.choices[0]
        top = _top_logprobs(choice)
        if top is not None:
            probs = [sum(math.exp(lp) for tok, lp in top if tok.strip() == lab) for lab in labels]
            return self._note(prompt, Reading("logprobs", None, attempts), _logs(probs))
        if self.cfg.verdict_mode == "logprobs":
            return self._note(prompt, Reading("failed", "the server returned no logprobs", attempts), nan)
        text = _content(choice).strip().strip(".:!\"'")
        return self._note(prompt, Reading("reply", None, attempts), _logs([float(text == lab) for lab in labels]))

    def _note(self, prompt: str, reading: Reading, row: list[float]) -> list[float]:
        with self._lock:
            self._readings[prompt] = reading
            self.stats[reading.mode] += 1
        return row

    def _request(self, body: dict[str, Any]):
        """(reply, None, attempts) or (None, reason, attempts) after bounded retries."""
        import openai

        retryable = (openai.APITimeoutError, openai.APIConnectionError, openai.RateLimitError,
                     openai.InternalServerError)
        attempts, error = 0, ""
        for attempt in range(self.cfg.max_retries + 1):
            attempts += 1
            with self._lock:
                self.stats["requests"] += 1
            try:
                reply = self._client.chat.completions.create(**body, timeout=self.cfg.timeout_s)
                error = _malformed(reply)
                if error is None:
                    return reply, None, attempts
            except retryable as e:
                error = self._scrub(f"{type(e).__name__}: {e}")
            except ValueError as e:  # a body that is not JSON (json.JSONDecodeError): cut or garbled
                error = self._scrub(f"malformed reply (not JSON: {e})")
            except openai.APIError as e:  # 4xx: the request itself is wrong, retrying cannot help
                return None, self._scrub(f"{type(e).__name__}: {e}"), attempts
            if attempt < self.cfg.max_retries:
                with self._lock:
                    self.stats["retries"] += 1
                self._sleep(min(self.cfg.backoff_s * 2**attempt, self.cfg.backoff_max_s))
        return None, f"failed after {attempts} attempt(s): {error}", attempts

    def _scrub(self, text: str) -> str:
        return text.replace(self._secret, "***") if self._secret else text


def _logs(probs: Sequence[float]) -> list[float]:
    return [math.log(p) if p > 0 else -math.inf for p in probs]


def _malformed(reply: Any) -> str | None:
    """Why `reply` is no chat completion with a first choice (a body that parsed as other JSON or as
    text, or `"choices": []`), or None when it is one."""
    choices = getattr(reply, "choices", None)
    if not isinstance(choices, list):
        return f"malformed reply (a {type(reply).__name__}, not a chat completion)"
    if not choices or choices[0] is None:
        return "malformed reply (no choices)"
    return None


def _content(choice: Any) -> str:
    message = getattr(choice, "message", None)
    return getattr(message, "content", None) or ""


def _top_logprobs(choice: Any) -> list[tuple[str, float]] | None:
    """(token, logprob) of the first reply token's alternatives, or None when the server gave none."""
    lp = getattr(choice, "logprobs", None)
    content = getattr(lp, "content", None) if lp is not None else None
    if not content:
        return None
    first = content[0]
    top = [(t.token, t.logprob) for t in (first.top_logprobs or [])]
    if first.token not in {t for t, _ in top}:
        top.append((first.token, first.logprob))
    return top


def _key(cfg: EndpointConfig) -> str | None:
    if cfg.api_key_env is None:
        return None
    key = os.environ.get(cfg.api_key_env)
    if not key:
        raise EndpointError(f"endpoint: environment variable {cfg.api_key_env} (endpoint.api_key_env) is not set")
    return key


def _client(cfg: EndpointConfig):
    import openai

    # retries are ours (counted, bounded, logged per verdict), so the client's own are off
    return openai.OpenAI(base_url=cfg.base_url, api_key=_key(cfg) or "none", max_retries=0, timeout=cfg.timeout_s)
