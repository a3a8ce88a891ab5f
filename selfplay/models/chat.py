"""Chat templates, in one place: chat messages -> the prompt string a backend sees.

- smollm2: ChatML, the template the tokenizer ships with (it adds a default system turn when none
  is given).
- qwen3: `enable_thinking` is passed to the template; off (the default) renders an empty
  `<think>\n\n</think>\n\n` block after the assistant header, which is how Qwen3 is told to answer
  without reasoning.
- gemma3: no system role. The system message is folded into the first user turn here, before the
  template sees it, so every Gemma prompt has the same shape whichever template version is installed.

Real Qwen3 and Gemma tokenizers bring their own template. Tiny random test models share the SmolLM2
tokenizer, so `loading.tiny_model` installs `FAMILY_TEMPLATES[family]` on their copy: a compact
rendering of the same format for plain-text conversations, so tiny-qwen3 / tiny-gemma3 prompts look
like the real ones.
"""

from __future__ import annotations

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


def render(
    tokenizer, cfg: PolicyConfig, messages: Sequence[dict[str, str]], add_generation_prompt: bool = True
) -> str:
    """Messages -> prompt string through the policy's chat template (see the module docstring).

    Backends tokenize the result with `add_special_tokens=False`: the template already holds every
    special token the model expects (Gemma's BOS included).
    """
    messages = check_messages(messages)
    if not cfg.system_role:
        messages = fold_system(messages)
    if not getattr(tokenizer, "chat_template", None):
        raise ValueError(f"{cfg.name}: the tokenizer has no chat template")
    extra = {"enable_thinking": cfg.enable_thinking} if cfg.chat_template == "qwen3" else {}
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=add_generation_prompt, **extra
    )
