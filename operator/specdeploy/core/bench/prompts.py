"""Prompt sets of a SpeculativeBenchmark (pure: the tokenizer is passed in as functions).

Four sources (``spec.prompts``; the plan's ``prompts.kind``):

- ``bundled``: ``code`` or ``chat``, 32 short prompts each, written for specdeploy by its
  authors and shipped under the project's license (Apache-2.0): ``specdeploy/data/prompts/``.
- ``file``: JSON lines, one object per line with a string ``prompt`` (a ConfigMap key mounted
  in the client Job); blank lines are skipped, anything else is an error naming the line.
- ``requests``: whole chat-completion requests (captured traffic: messages, tools, response_format, thinking on
  or off), replayed as they are through /v1/chat/completions, sampled per point by (seed, concurrency); the
  bundled request sets ``tool-call`` and ``structured-output`` (``data/prompts/*.jsonl``) are written for
  specdeploy by its authors too (Apache-2.0).
- ``generated``: seeded word sequences (``random.Random``, so the same seed gives the same
  text on every machine and Python version >= 3.2).

Every point asks for prompts of exactly ``context`` tokens. Prompt ``i`` of a point is built
from the set's prompts ``i, i+1, ...`` (cycling) joined by spaces, or from generated
words, then cut to exactly ``context`` tokens as the engine counts them (special tokens the
completions endpoint adds, e.g. BOS, included): :func:`fit_to_tokens` cuts the token ids,
decodes them, and re-counts the text, adjusting until the count is exact (decoding and
re-encoding can merge or split tokens at the cut).
"""

from __future__ import annotations

import json
import random
from importlib import resources
from typing import Callable, Sequence
from specdeploy.core.errors import Permanent

BUNDLED = ("code", "chat")
# Request sets: whole OpenAI chat-completion requests, replayed as captured (no fitting to a context).
BUNDLED_REQUESTS = ("tool-call", "structured-output")
MAX_FILE_BYTES = 8 * 1024 * 1024  # a ConfigMap holds at most 1 MiB; a mounted file is bounded too
MAX_PROMPT_CHARS = 200_000
MAX_PROMPTS = 100_000
FIT_TRIES = 8

# Words for generated prompts: common English words (each one token or two for most tokenizers).
_WORDS = ("the of and to in is was for on that with as by at from this be are or an it not which have but all can "
          "one had were they their there been has more when who will no if out so what up said about into than "
          "them some could time these two may then first any new like now people my made over only way did many "
          "before must through back years where much your well down should because each just those how too little "
          "state good very make world still own see men work long get here between both life being under never day "
          "same another know while last might us great old year off come since against go came right used take "
          "three small number water light house place point city tree river cloud stone green quiet bright").split()


class PromptError(Permanent, ValueError):
    """A prompt set cannot be read or fitted (the message names the line or the point)."""


def bundled(name: str) -> list[str]:
    """A bundled prompt set (``code`` or ``chat``)."""
    if name not in BUNDLED:
        raise PromptError(f"no bundled prompt set {name!r}: use one of {', '.join(BUNDLED)}")
    text = resources.files("specdeploy.data").joinpath("prompts", f"{name}.json").read_text(encoding="utf-8")
    return list(json.loads(text)["prompts"])


def parse_jsonl(text: str, *, source: str = "prompts.jsonl") -> list[str]:
    """JSON lines ``{"prompt": "..."}``; blank lines skipped; errors name the line."""
    if not isinstance(text, str):
        raise PromptError(f"{source}: not text")
    if len(text) > MAX_FILE_BYTES:
        raise PromptError(f"{source}: {len(text)} characters, over the limit of {MAX_FILE_BYTES}")
    out: list[str] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise PromptError(f"{source} line {n}: not JSON ({str(e)[:80]}); each line must be "
                              '{"prompt": "..."}') from None
        if not isinstance(doc, dict) or "prompt" not in doc:
            raise PromptError(f'{source} line {n}: needs an object with a "prompt" field, like {{"prompt": "..."}}')
        prompt = doc["prompt"]
        if not isinstance(prompt, str) or not prompt.strip():
            raise PromptError(f'{source} line {n}: "prompt" must be a non-empty string')
        if len(prompt) > MAX_PROMPT_CHARS:
            raise PromptError(f"{source} line {n}: the prompt has {len(prompt)} characters, over {MAX_PROMPT_CHARS}")
        out.append(prompt)
        if len(out) > MAX_PROMPTS:
            raise PromptError(f"{source}: more than {MAX_PROMPTS} prompts")
    if not out:
        raise PromptError(f'{source}: no prompts (JSON lines {{"prompt": "..."}} expected)')
    return out


def generated_words(seed: int, index: int, n_words: int) -> str:
    """Seeded text of ``n_words`` words for prompt ``index`` (independent of other prompts)."""
    rng = random.Random(f"specdeploy-bench:{seed}:{index}")
    return " ".join(rng.choice(_WORDS) for _ in range(n_words))


def source_text(prompts: Sequence[str], index: int, min_chars: int) -> str:
    """The set's prompts from ``index`` on (cycling), joined by one space, at least ``min_chars`` long.
    (A space, not a blank line: a word-level language stays in its distribution across the joins.)"""
    if not prompts:
        raise PromptError("the prompt set is empty")
    parts: list[str] = []
    total = 0
    i = index
    while total < min_chars:
        p = prompts[i % len(prompts)]
        parts.append(p)
        total += len(p) + 1
        i += 1
    return " ".join(parts)


Tokenize = Callable[[str], list[int]]  # text -> ids, WITHOUT special tokens
Detokenize = Callable[[list[int]], str]
Count = Callable[[str], int]  # text -> tokens as the completions endpoint counts them (special tokens included)


def fit_to_tokens(text: str, n: int, tokenize: Tokenize, detokenize: Detokenize, count: Count) -> str | None:
    """``text`` cut to exactly ``n`` tokens as ``count`` sees them, or None when ``text`` is too
    short (the caller supplies more). Raises PromptError when no cut gives exactly ``n``."""
    ids = tokenize(text)
    special = count("")
    target = n - special
    if target < 1:
        raise PromptError(f"context {n} leaves no room for a prompt: the engine adds {special} special token(s)")
    if len(ids) < target + 2:
        return None
    seen: set[int] = set()
    for _ in range(FIT_TRIES):
        if target < 1 or target in seen:
            break
        seen.add(target)
        out = detokenize(ids[:target])
        got = count(out)
        if got == n:
            return out
        target -= got - n
    raise PromptError(f"no cut of the prompt text gives exactly {n} tokens with this tokenizer")


def build_prompts(kind: str, n_prompts: int, context: int, tokenize: Tokenize, detokenize: Detokenize,
                  count: Count, *, prompts: Sequence[str] = (), seed: int = 0) -> list[str]:
    """``n_prompts`` prompts of exactly ``context`` tokens (``kind``: generated, bundled or file;
    ``prompts``: the set for bundled/file)."""
    out: list[str] = []
    for i in range(n_prompts):
        chars = max(64, context * 6)
        for _ in range(12):
            if kind == "generated":
                text = generated_words(seed, i, max(8, chars // 4))
            else:
                text = source_text(prompts, i, chars)
            fitted = fit_to_tokens(text, context, tokenize, detokenize, count)
            if fitted is not None:
                out.append(fitted)
                break
            chars *= 2
        else:
            raise PromptError(f"could not build a prompt of {context} tokens")
    return out


# ----------------------------------------------------------------- request sets (traffic-shaped)
# A request set holds OpenAI chat-completion request bodies, one per line (captured traffic: chat messages, tools,
# response_format, thinking on or off). The client replays them through /v1/chat/completions; only the keys
# below are kept (everything that selects the model, sampling, length or streaming is the plan's; an unknown key
# is an error naming it, so a request cannot smuggle engine options such as logits processors).
REQUEST_KEYS = ("messages", "tools", "tool_choice", "response_format", "chat_template_kwargs")
IGNORED_REQUEST_KEYS = ("model", "max_tokens", "max_completion_tokens", "temperature", "top_p", "stream",
                        "stream_options", "n", "seed", "user", "metadata")
ROLES = ("system", "developer", "user", "assistant", "tool")
MAX_MESSAGES = 256
MAX_TOOLS = 128
MAX_REQUEST_CHARS = 400_000


def _check_message(m: object, where: str) -> dict:
    if not isinstance(m, dict):
        raise PromptError(f"{where}: a message must be an object with role and content")
    role = m.get("role")
    if role not in ROLES:
        raise PromptError(f"{where}.role: {str(role)[:40]!r} is not one of {', '.join(ROLES)}")
    out: dict = {"role": role}
    content = m.get("content")
    if isinstance(content, list):
        if not all(isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str) for c in content):
            raise PromptError(f"{where}.content: only text parts ({{\"type\": \"text\", \"text\": ...}}) are replayed")
        out["content"] = [{"type": "text", "text": c["text"]} for c in content]
    elif isinstance(content, str) or (content is None and (role == "assistant")):
        out["content"] = content
    else:
        raise PromptError(f"{where}.content: a string or a list of text parts")
    for k in ("name", "tool_call_id"):
        if isinstance(m.get(k), str):
            out[k] = m[k][:256]
    if role == "assistant" and isinstance(m.get("tool_calls"), list):
        calls = []
        for j, c in enumerate(m["tool_calls"][:MAX_TOOLS]):
            fn = c.get("function") if isinstance(c, dict) else None
            if not (isinstance(fn, dict) and isinstance(fn.get("name"), str) and isinstance(fn.get("arguments"), str)):
                raise PromptError(f"{where}.tool_calls[{j}]: needs function.name and function.arguments (strings)")
            calls.append({"id": str(c.get("id") or f"call_{j}")[:64], "type": "function",
                          "function": {"name": fn["name"][:256], "arguments": fn["arguments"]}})
        out["tool_calls"] = calls
    return out


def parse_request(doc: object, where: str) -> dict:
    """One chat-completion request, reduced to what is replayed; PromptError names the field."""
    if not isinstance(doc, dict):
        raise PromptError(f"{where}: each line must be a chat-completion request object with \"messages\"")
    unknown = sorted(k for k in doc if k not in REQUEST_KEYS and k not in IGNORED_REQUEST_KEYS)
    if unknown:
        raise PromptError(f"{where}: {', '.join(map(str, unknown))[:120]} cannot be replayed; a request may hold "
                          f"{', '.join(REQUEST_KEYS)} (model, sampling and length come from the benchmark)")
    msgs = doc.get("messages")
    if not isinstance(msgs, list) or not msgs or len(msgs) > MAX_MESSAGES:
        raise PromptError(f"{where}.messages: a list of 1 to {MAX_MESSAGES} messages")
    out: dict = {"messages": [_check_message(m, f"{where}.messages[{i}]") for i, m in enumerate(msgs)]}
    tools = doc.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or len(tools) > MAX_TOOLS:
            raise PromptError(f"{where}.tools: a list of at most {MAX_TOOLS} tools")
        for j, t in enumerate(tools):
            fn = t.get("function") if isinstance(t, dict) else None
            if not (isinstance(t, dict) and t.get("type") == "function" and isinstance(fn, dict)
                    and isinstance(fn.get("name"), str) and isinstance(fn.get("parameters", {}), dict)):
                raise PromptError(f"{where}.tools[{j}]: {{\"type\": \"function\", \"function\": {{\"name\": ..., "
                                  "\"parameters\": {...}}}")
        out["tools"] = tools
    tc = doc.get("tool_choice")
    if tc is not None:
        if not (tc in ("auto", "none", "required") or (isinstance(tc, dict) and tc.get("type") == "function")):
            raise PromptError(f"{where}.tool_choice: auto, none, required or a function choice")
        out["tool_choice"] = tc
    rf = doc.get("response_format")
    if rf is not None:
        if not (isinstance(rf, dict) and rf.get("type") in ("text", "json_object", "json_schema")):
            raise PromptError(f"{where}.response_format.type: text, json_object or json_schema")
        if rf["type"] == "json_schema" and not isinstance(rf.get("json_schema"), dict):
            raise PromptError(f"{where}.response_format.json_schema: an object with the schema")
        out["response_format"] = rf
    kw = doc.get("chat_template_kwargs")
    if kw is not None:
        if not (isinstance(kw, dict) and set(kw) <= {"enable_thinking"} and isinstance(kw.get("enable_thinking", False), bool)):
            raise PromptError(f"{where}.chat_template_kwargs: only enable_thinking (true or false) is replayed")
        out["chat_template_kwargs"] = {"enable_thinking": kw["enable_thinking"]} if "enable_thinking" in kw else {}
    return out


def parse_requests_jsonl(text: str, *, source: str = "requests.jsonl") -> list[dict]:
    """JSON lines of chat-completion requests; blank lines skipped; errors name the line and the field."""
    if not isinstance(text, str):
        raise PromptError(f"{source}: not text")
    if len(text) > MAX_FILE_BYTES:
        raise PromptError(f"{source}: {len(text)} characters, over the limit of {MAX_FILE_BYTES}")
    out: list[dict] = []
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        if len(line) > MAX_REQUEST_CHARS:
            raise PromptError(f"{source} line {n}: {len(line)} characters, over {MAX_REQUEST_CHARS}")
        try:
            doc = json.loads(line)
        except (ValueError, RecursionError) as e:
            raise PromptError(f"{source} line {n}: not JSON ({str(e)[:80]})") from None
        out.append(parse_request(doc, f"{source} line {n}"))
        if len(out) > MAX_PROMPTS:
            raise PromptError(f"{source}: more than {MAX_PROMPTS} requests")
    if not out:
        raise PromptError(f"{source}: no requests (JSON lines of chat-completion requests expected)")
    return out


def bundled_requests(name: str) -> list[dict]:
    """A bundled request set (``tool-call`` or ``structured-output``)."""
    if name not in BUNDLED_REQUESTS:
        raise PromptError(f"no bundled request set {name!r}: use one of {', '.join(BUNDLED_REQUESTS)}")
    text = resources.files("specdeploy.data").joinpath("prompts", f"{name}.jsonl").read_text(encoding="utf-8")
    return parse_requests_jsonl(text, source=f"bundled {name}")


def sample_requests(requests: Sequence[dict], n: int, seed: int, concurrency: int) -> list[dict]:
    """``n`` requests for one point, sampled with replacement by (seed, concurrency): every variant replays the same
    requests at the same load, so greedy outputs compare point by point."""
    if not requests:
        raise PromptError("the request set is empty")
    rng = random.Random(f"specdeploy-bench-requests:{seed}:{concurrency}")
    return [requests[rng.randrange(len(requests))] for _ in range(n)]


def to_jsonl(prompts: Sequence[str]) -> str:
    return "".join(json.dumps({"prompt": p}, ensure_ascii=False) + "\n" for p in prompts)


__all__ = ["BUNDLED", "BUNDLED_REQUESTS", "PromptError", "bundled", "parse_jsonl", "parse_request",
           "parse_requests_jsonl", "bundled_requests", "sample_requests", "generated_words", "source_text", "fit_to_tokens",
           "build_prompts", "to_jsonl"]
