"""Chat templates: a conversation turned into the one string a chat model was trained on.

An instruction-tuned model reads a conversation as text with markers around each turn —
SmolLM2 and Qwen write ``<|im_start|>user\\n...<|im_end|>``, Llama 3
``<|start_header_id|>user<|end_header_id|>\\n\\n...<|eot_id|>`` — and answers after the marker
that opens the assistant's turn (the *generation prompt*). Each checkpoint ships its own
markers as a Jinja2 template (tokenizer_config.json, chat_template.jinja, or a GGUF file's
``tokenizer.chat_template``); `render_chat` renders it the way transformers'
`apply_chat_template` does, so that the same messages give the same text:

  * a sandboxed environment (a template is code from the checkpoint's author) with
    ``trim_blocks`` and ``lstrip_blocks``, and the loop controls ``break``/``continue``;
  * the helpers templates call: ``raise_exception(msg)``, a ``tojson`` filter that leaves
    non-ASCII text and HTML characters as they are, ``strftime_now(fmt)``, and the
    ``{% generation %}`` block (which renders its body);
  * the variables: ``messages``, ``add_generation_prompt``, ``tools`` and ``documents``
    (None), and the special tokens by name (``bos_token``, ``eos_token``, ...).

A template that refuses the conversation (``raise_exception``) or fails to render raises
`ChatTemplateError` with the template's own message.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache
from typing import Any, Sequence

__all__ = ["render_chat", "ChatTemplateError", "chat_messages"]


class ChatTemplateError(ValueError):
    """A chat template that cannot render this conversation; the message says why."""


def _tojson(x: Any, ensure_ascii: bool = False, indent: Any = None, separators: Any = None,
            sort_keys: bool = False) -> str:
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


@lru_cache(maxsize=16)
def _compile(template: str) -> Any:
    import jinja2
    import jinja2.ext
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    class Generation(jinja2.ext.Extension):
        """``{% generation %}...{% endgeneration %}``: marks the assistant's text for
        training masks; rendering just renders the body."""

        tags = {"generation"}

        def parse(self, parser):
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
            return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body
                                          ).set_lineno(lineno)

        def _body(self, caller):
            return caller()

    def raise_exception(message: str) -> None:
        raise jinja2.exceptions.TemplateError(message)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[Generation, jinja2.ext.loopcontrols])
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(template)


def chat_messages(user: str, system: str | None = None) -> list[dict[str, str]]:
    """The conversation of one user turn, after an optional system prompt."""
    messages = [] if system is None else [{"role": "system", "content": system}]
    return messages + [{"role": "user", "content": user}]


def render_chat(template: str, messages: Sequence[dict[str, Any]], *,
                add_generation_prompt: bool = True,
                special_tokens: dict[str, str] | None = None, **extra: Any) -> str:
    """The text of a conversation under a checkpoint's chat `template`.

    `messages` are dicts with "role" and "content"; `add_generation_prompt` ends the text with
    the opening of the assistant's turn, where the model continues. `special_tokens` (e.g.
    {"bos_token": "<s>", "eos_token": "</s>"}) and `extra` become template variables.
    """
    import jinja2

    if not isinstance(template, str) or not template:
        raise ChatTemplateError("the checkpoint has no chat template")
    if not all(isinstance(m, dict) and "role" in m for m in messages):
        raise ChatTemplateError("each message must be a dict with a 'role' (and 'content')")
    variables = {**(special_tokens or {}), **extra}
    try:
        return _compile(template).render(messages=[dict(m) for m in messages], tools=None,
                                         documents=None,
                                         add_generation_prompt=add_generation_prompt,
                                         **variables)
    except jinja2.exceptions.TemplateError as err:
        raise ChatTemplateError(f"the chat template refused the conversation: {err}") from None
    except (TypeError, ValueError, KeyError, AttributeError) as err:
        raise ChatTemplateError(f"the chat template failed: {type(err).__name__}: {err}"
                                ) from None
