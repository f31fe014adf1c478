"""core/benchprompts.py: bundled sets, ConfigMap JSON lines, seeded prompts cut to exact token counts."""

from __future__ import annotations

import json

import pytest

from specdeploy.core import benchprompts as bp


@pytest.mark.parametrize("name", bp.BUNDLED)
def test_bundled_sets_are_ours_and_short(name):
    prompts = bp.bundled(name)
    assert 24 <= len(prompts) <= 64 and len(set(prompts)) == len(prompts)
    assert all(isinstance(p, str) and 10 < len(p) < 400 for p in prompts)
    from importlib import resources

    doc = json.loads(resources.files("specdeploy.data").joinpath("prompts", f"{name}.json").read_text())
    assert doc["license"] == "Apache-2.0" and "specdeploy" in doc["source"]


def test_unknown_bundled_set():
    with pytest.raises(bp.PromptError, match="use one of code, chat"):
        bp.bundled("math")


@pytest.mark.parametrize("text, words", [
    ('{"prompt": "a"}\nnot json\n', "line 2: not JSON"),
    ('{"prompt": "a"}\n\n["x"]\n', "line 3: needs an object"),
    ('{"text": "a"}\n', 'line 1: needs an object with a "prompt" field'),
    ('{"prompt": 3}\n', 'line 1: "prompt" must be a non-empty string'),
    ('{"prompt": "  "}\n', 'line 1: "prompt" must be a non-empty string'),
    ("\n\n", "no prompts"),
    ('{"prompt": "' + "x" * (bp.MAX_PROMPT_CHARS + 1) + '"}', "over 200000"),
])
def test_bad_jsonl_names_the_line(text, words):
    with pytest.raises(bp.PromptError, match=words):
        bp.parse_jsonl(text, source="my-prompts/prompts.jsonl")


def test_jsonl_ok_and_extra_fields_ignored():
    text = '{"prompt": "one"}\r\n\n{"prompt": "two", "output_tokens": 5}\n'
    assert bp.parse_jsonl(text) == ["one", "two"]
    assert bp.parse_jsonl(bp.to_jsonl(["a \"q\"", "é\nline"])) == ["a \"q\"", "é\nline"]


def test_generated_words_are_seeded_and_independent_per_prompt():
    a = bp.generated_words(0, 1, 20)
    assert a == bp.generated_words(0, 1, 20) and a != bp.generated_words(1, 1, 20) != bp.generated_words(0, 2, 20)
    assert bp.generated_words(0, 1, 40).startswith(a)  # longer text extends, so fitting is stable


class Chars:
    """A tokenizer that merges: one token per character, except "ab" is one token; BOS added on count."""

    def tokenize(self, text):
        out, i = [], 0
        while i < len(text):
            if text[i:i + 2] == "ab":
                out.append(1000)
                i += 2
            else:
                out.append(ord(text[i]))
                i += 1
        return out

    def detokenize(self, ids):
        return "".join("ab" if i == 1000 else chr(i) for i in ids)

    def count(self, text):
        return 1 + len(self.tokenize(text))


@pytest.mark.parametrize("n", [2, 5, 17, 40])
def test_fit_to_tokens_is_exact(n):
    t = Chars()
    out = bp.fit_to_tokens("xab" * 40, n, t.tokenize, t.detokenize, t.count)
    assert t.count(out) == n


def test_fit_needs_more_text_or_room():
    t = Chars()
    assert bp.fit_to_tokens("abc", 10, t.tokenize, t.detokenize, t.count) is None
    with pytest.raises(bp.PromptError, match="leaves no room"):
        bp.fit_to_tokens("abc", 1, t.tokenize, t.detokenize, t.count)


@pytest.mark.parametrize("kind, prompts", [("generated", ()), ("bundled", tuple(bp.bundled("code"))),
                                           ("file", ("short one", "another"))])
def test_build_prompts_exact_and_in_order(kind, prompts):
    t = Chars()
    out = bp.build_prompts(kind, 5, 300, t.tokenize, t.detokenize, t.count, prompts=prompts, seed=7)
    assert len(out) == 5 and all(t.count(p) == 300 for p in out)
    assert len(set(out)) == (5 if kind == "generated" else min(5, len(prompts)))  # a set of 2 cycles
    if kind != "generated":
        assert out[0].startswith(prompts[0][:50]) and out[1].startswith(prompts[1][:50])
    assert out == bp.build_prompts(kind, 5, 300, t.tokenize, t.detokenize, t.count, prompts=prompts, seed=7)
