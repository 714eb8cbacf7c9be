"""Chat templates, found beside a tokenizer as `transformers` finds them and rendered in the environment of its
`apply_chat_template`, inside a sandbox: templates come from the Hub and are untrusted code."""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache, partial
from pathlib import Path

import jinja2
import jinja2.ext
import jinja2.nodes
from jinja2.sandbox import ImmutableSandboxedEnvironment


class ChatTemplateError(ValueError):
    """A chat template is missing, malformed, or failed to render a conversation."""


@dataclass(frozen=True)
class ChatTemplate:
    source: str  # where the template came from, for error messages
    text: str

    def render(self, conversation: list[dict], add_generation_prompt: bool = False, **variables) -> str:
        """One conversation -> prompt text. `variables` are the tokenizer's special tokens and extras."""
        check_conversation(conversation)
        try:
            template = _compile(self.text)
        except jinja2.TemplateSyntaxError as e:
            raise ChatTemplateError(f"the chat template in {self.source} is not valid jinja (line {e.lineno}: "
                                    f"{e.message}): fix the template or give the checkpoint a working one") from None
        try:
            return template.render(messages=conversation, add_generation_prompt=add_generation_prompt,
                                   tools=None, documents=None, **variables)
        except jinja2.TemplateError as e:
            raise ChatTemplateError(f"the chat template in {self.source} failed to render the conversation "
                                    f"({e}): check the messages' roles and order, or fix the template") from None


def check_conversation(conversation, where: str = "conversation") -> None:
    """A conversation is a list of {role, content} dicts; anything else names what was wrong."""
    if not isinstance(conversation, (list, tuple)) or not conversation:
        raise ChatTemplateError(f"{where} is {type(conversation).__name__} {conversation!r:.60}; expected a "
                                "non-empty list of {'role': ..., 'content': ...} messages")
    for i, m in enumerate(conversation):
        if not isinstance(m, dict) or "role" not in m or "content" not in m:
            raise ChatTemplateError(f"{where} message {i} is {m!r:.80}; every message needs a 'role' and a "
                                    "'content', e.g. {'role': 'user', 'content': 'Hi'}")


def is_conversation(x) -> bool:
    """True for a list of message dicts (one chat), as opposed to text or token ids."""
    return isinstance(x, (list, tuple)) and len(x) > 0 and all(isinstance(m, dict) for m in x)


def find_chat_template(tokenizer_dir: str | Path, tokenizer_config: dict) -> ChatTemplate | None:
    """`chat_template.jinja` beside the tokenizer, else tokenizer_config.json's `chat_template`, else None."""
    file = Path(tokenizer_dir) / "chat_template.jinja"
    if file.is_file():
        return ChatTemplate(str(file), file.read_text(encoding="utf-8"))
    value = tokenizer_config.get("chat_template")
    where = f"{Path(tokenizer_dir) / 'tokenizer_config.json'} (key 'chat_template')"
    if isinstance(value, list):  # named templates: [{"name": "default", "template": ...}, ...]
        named = {t.get("name"): t.get("template") for t in value if isinstance(t, dict)}
        value = named.get("default")
        if value is None:
            raise ChatTemplateError(f"{where} lists templates {sorted(map(str, named))} but none is named "
                                    "'default': name one 'default' or save it as chat_template.jinja")
    if value is None or value == "":
        return None
    if not isinstance(value, str):
        raise ChatTemplateError(f"{where} is a {type(value).__name__}; expected the template text as a string")
    return ChatTemplate(where, value)


def _raise_exception(message):
    raise jinja2.TemplateError(message)


class GenerationTag(jinja2.ext.Extension):
    """`{% generation %}...{% endgeneration %}` marks assistant text for masks; rendering keeps the body."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return jinja2.nodes.CallBlock(self.call_method("_body"), [], [], body).set_lineno(lineno)

    def _body(self, caller):
        return caller()


@lru_cache(maxsize=16)
def _compile(text: str):
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = partial(json.dumps, ensure_ascii=False)  # jinja's own escapes HTML, unlike transformers'
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
    return env.from_string(text)
