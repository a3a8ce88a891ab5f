"""Chat templates, in one place: chat messages -> the prompt string a backend sees.

- smollm2: ChatML, the template the tokenizer ships with (it adds a default system turn when none
  is given).
- qwen3: `enable_thinking` is passed to the template; off (the default) renders an empty
  `<think>\n\n</think>\n\n` block after the assistant header, which is how Qwen3 is told to answer
  without reasoning.
- gemma3: no system role. The system message is folded into the first user turn here, before the
  template sees it, so every Gemma prompt has the same shape whichever template version is installed.

Sealing: before the template is applied, every message's content is rewritten so that no special
or added token of that tokenizer can arise from it (`seal`): each occurrence of a special-token or
added-token string (`<|im_start|>`, `<|im_end|>`, `<|endoftext|>`, `<start_of_turn>`, `<bos>`,
Qwen3's `<think>`, ...; added tokens that are pure whitespace are left alone, they end nothing) gets
an inert look-alike — its first character swapped for a visually similar one that no
normaliser maps back (`<` -> `‹` U+2039, `[` -> `⟦`, `{` -> `❴`, `|` -> `ǀ`; otherwise a word joiner
after the first character). The policy can write `<|im_end|>` as ordinary tokens and decoding keeps
that text; without sealing the judge's tokenizer would turn it back into the real token and close the
turn. Only the template's own markup yields special token ids, so one answer cannot forge a turn in
a judge, oracle or policy prompt on either backend (both render here).

Real Qwen3 and Gemma tokenizers bring their own template. Tiny random test models share the SmolLM2
tokenizer, so `loading.tiny_model` installs `FAMILY_TEMPLATES[family]` on their copy: a compact
rendering of the same format for plain-text conversations, so tiny-qwen3 / tiny-gemma3 prompts look
like the real ones.
"""

from __future__ import annotations

import contextlib
import re
import weakref
from collections.abc import Sequence

from selfplay.models.config import PolicyConfig

ROLES = ("system", "user", "assistant")

_QWEN3 = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

_GEMMA3 = (
    "{{- bos_token }}"
    "{%- for message in messages %}"
    "{%- if message['role'] == 'system' %}"
    "{{- raise_exception('gemma3 has no system role') }}"
    "{%- endif %}"
    "{%- set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{- '<start_of_turn>' + role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<start_of_turn>model\\n' }}{%- endif %}"
)

# None: keep the template the tokenizer ships with.
FAMILY_TEMPLATES: dict[str, str | None] = {"smollm2": None, "qwen3": _QWEN3, "gemma3": _GEMMA3}


def check_messages(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """A copy of `messages`, or ValueError naming the bad message."""
    if not messages:
        raise ValueError("chat: no messages")
    out = []
    for i, m in enumerate(messages):
        role, content = m.get("role"), m.get("content")
        if role not in ROLES:
            raise ValueError(f"chat: message {i} has role {role!r}, expected one of {ROLES}")
        if not isinstance(content, str):
            raise ValueError(f"chat: message {i} content must be a string, got {type(content).__name__}")
        if role == "system" and i != 0:
            raise ValueError(f"chat: a system message may only come first (found at {i})")
        out.append({"role": role, "content": content})
    return out


def fold_system(messages: Sequence[dict[str, str]]) -> list[dict[str, str]]:
    """Merge a leading system message into the first user turn (`system + "\\n\\n" + user`)."""
    messages = list(messages)
    if not messages or messages[0]["role"] != "system":
        return messages
    system, rest = messages[0]["content"], messages[1:]
    if not rest or rest[0]["role"] != "user":
        return [{"role": "user", "content": system}, *rest]
    first = {"role": "user", "content": f"{system}\n\n{rest[0]['content']}"}
    return [first, *rest[1:]]


_LOOKALIKE = {"<": "\u2039", "[": "\u27e6", "{": "\u2774", "|": "\u01c0"}
_WORD_JOINER = "\u2060"
# per tokenizer: (vocabulary size when built, pattern of its special strings); added tokens change len
_PATTERNS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def special_strings(tokenizer) -> list[str]:
    """Every special-token string and every non-whitespace added token of `tokenizer`, longest first."""
    found = set(getattr(tokenizer, "all_special_tokens", None) or [])
    for tok in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        found.add(str(getattr(tok, "content", tok)))
    return sorted((s for s in found if s.strip()), key=lambda s: (-len(s), s))


def _pattern(tokenizer) -> re.Pattern[str] | None:
    size = len(tokenizer) if hasattr(tokenizer, "__len__") else -1
    try:
        cached = _PATTERNS.get(tokenizer)
    except TypeError:  # not weak-referenceable: build each time
        cached = None
    if cached is None or cached[0] != size:
        strings = special_strings(tokenizer)
        cached = (size, re.compile("|".join(map(re.escape, strings))) if strings else None)
        with contextlib.suppress(TypeError):
            _PATTERNS[tokenizer] = cached
    return cached[1]


def inert(token: str) -> str:
    """A look-alike of a special-token string that contains no special-token string."""
    head = token[0]
    return _LOOKALIKE[head] + token[1:] if head in _LOOKALIKE else head + _WORD_JOINER + token[1:]


# for a backend without the model's tokenizer (an OpenAI-compatible endpoint applies the template
# server-side): every `<|...|>` marker plus the other turn and sequence markers of common templates
COMMON_SPECIAL = re.compile(
    r"<\|[^\s<>|]{1,40}\|>|</?s>|<(?:bos|eos|pad|unk|start_of_turn|end_of_turn|think|/think)>|\[/?INST\]"
)


def seal(tokenizer, text: str) -> str:
    """`text` with every special/added-token string of `tokenizer` replaced by `inert(...)`, repeated
    until none is left (a replacement could in principle complete another one). `tokenizer=None`
    seals against `COMMON_SPECIAL` instead."""
    pattern = COMMON_SPECIAL if tokenizer is None else _pattern(tokenizer)
    if pattern is None:
        return text
    for _ in range(8):
        if not pattern.search(text):
            return text
        text = pattern.sub(lambda m: inert(m.group(0)), text)
    raise ValueError(f"chat: cannot seal text against the tokenizer's special tokens: {text[:80]!r}")


def render(
    tokenizer, cfg: PolicyConfig, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True
) -> str:
    """Messages -> prompt string through the policy's chat template (see the module docstring).

    Backends tokenize the result with `add_special_tokens=False`: the template already holds every
    special token the model expects (Gemma's BOS included), and sealed contents hold none.
    """
    messages = [{"role": m["role"], "content": seal(tokenizer, m["content"])} for m in check_messages(messages)]
    if not cfg.system_role:
        messages = fold_system(messages)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{cfg.name}: the tokenizer has no chat template")
    extra = {"enable_thinking": cfg.enable_thinking} if cfg.chat_template == "qwen3" else {}
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
    )


def end_of_turn(tokenizer) -> str:
    """The string that closes the policy's own turn, which sampling stops at: the tokenizer's EOS
    for the families we ship (SmolLM2 and Qwen3 `<|im_end|>`, Gemma3 `<end_of_turn>` set as EOS).
    An answer scored as the policy's turn is the answer text followed by it."""
    return tokenizer.eos_token or ""
