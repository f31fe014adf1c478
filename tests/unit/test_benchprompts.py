"""core/bench/prompts.py: bundled sets, ConfigMap JSON lines, seeded prompts cut to exact token counts."""

from __future__ import annotations

import json

import pytest

from specdeploy.core.bench import prompts as bp


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


# ----------------------------------------------------------------- request sets (traffic-shaped)


@pytest.mark.parametrize("name", bp.BUNDLED_REQUESTS)
def test_bundled_request_sets_parse_and_carry_their_shape(name):
    reqs = bp.bundled_requests(name)
    assert len(reqs) >= 12
    if name == "tool-call":
        assert all(r["tools"] for r in reqs) and any(m["role"] == "tool" for r in reqs for m in r["messages"])
    else:
        assert {r["response_format"]["type"] for r in reqs} == {"json_schema", "json_object"}
    assert {r.get("chat_template_kwargs", {}).get("enable_thinking") for r in reqs} >= {False}


REQ = {"messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize("doc,words", [
    ({**REQ, "logits_processors": ["evil.Proc"]}, "line 1: logits_processors cannot be replayed"),
    ({**REQ, "extra_body": {}}, "extra_body cannot be replayed"),
    ({"messages": []}, "line 1.messages: a list of 1 to"),
    ({"messages": [{"role": "root", "content": "x"}]}, "messages[0].role: 'root' is not one of"),
    ({"messages": [{"role": "user", "content": [{"type": "image_url", "image_url": "file:///etc/passwd"}]}]},
     "messages[0].content: only text parts"),
    ({**REQ, "tools": [{"type": "code_interpreter"}]}, "tools[0]:"),
    ({**REQ, "tool_choice": "always"}, "tool_choice: auto, none, required"),
    ({**REQ, "response_format": {"type": "grammar"}}, "response_format.type: text, json_object or json_schema"),
    ({**REQ, "response_format": {"type": "json_schema"}}, "response_format.json_schema: an object"),
    ({**REQ, "chat_template_kwargs": {"enable_thinking": True, "template": "{{x}}"}},
     "chat_template_kwargs: only enable_thinking"),
    ({"messages": [{"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]}]},
     "tool_calls[0]: needs function.name and function.arguments"),
    ([1, 2], "line 1: each line must be a chat-completion request object"),
])
def test_bad_requests_name_the_line_and_the_field(doc, words):
    with pytest.raises(bp.PromptError) as e:
        bp.parse_requests_jsonl(json.dumps(doc) + "\n")
    assert words in str(e.value)


def test_requests_keep_what_is_replayed_and_drop_what_the_plan_sets():
    doc = {**REQ, "model": "gpt-x", "max_tokens": 9999, "temperature": 1.3, "stream": False, "seed": 3,
           "response_format": {"type": "json_object"}, "chat_template_kwargs": {"enable_thinking": False}}
    (r,) = bp.parse_requests_jsonl("\n" + json.dumps(doc) + "\n\n")
    assert r == {"messages": REQ["messages"], "response_format": {"type": "json_object"},
                 "chat_template_kwargs": {"enable_thinking": False}}
    with pytest.raises(bp.PromptError, match="no requests"):
        bp.parse_requests_jsonl("\n\n")
    with pytest.raises(bp.PromptError, match="not JSON"):
        bp.parse_requests_jsonl("{oops\n")


def test_sampling_is_seeded_by_load_not_by_variant():
    reqs = [{"messages": [{"role": "user", "content": str(i)}]} for i in range(10)]
    a = bp.sample_requests(reqs, 8, 1, 4)
    assert a == bp.sample_requests(reqs, 8, 1, 4) and a != bp.sample_requests(reqs, 8, 2, 4)
    assert a != bp.sample_requests(reqs, 8, 1, 8) and len(a) == 8 and all(x in reqs for x in a)
    with pytest.raises(bp.PromptError):
        bp.sample_requests([], 1, 0, 1)


def test_api_request_sets_need_one_context_in_pydantic_and_cel():
    from specdeploy.api import benchmark as B
    from specdeploy_dev.apiserver import cel

    spec = {"deploymentRef": {"name": "d"}, "matrix": {"contexts": [1024, 4096], "concurrency": [1]},
            "prompts": {"bundled": "tool-call"}}
    rule = next(r["rule"] for r in B.SpeculativeBenchmarkSpec.model_json_schema()["x-kubernetes-validations"]
                if "request set" in r["message"])
    with pytest.raises(Exception, match="matrix.contexts must hold exactly one value"):
        B.SpeculativeBenchmarkSpec.model_validate(spec)
    assert cel.evaluate(rule, spec) is False
    for ok in ({**spec, "matrix": {"contexts": [1024], "concurrency": [1]}},
               {**spec, "prompts": {"bundled": "chat"}},
               {**spec, "prompts": {"configMapRef": {"name": "p"}}}):
        assert cel.evaluate(rule, ok) is True
        B.SpeculativeBenchmarkSpec.model_validate(ok)
    cm = {**spec, "prompts": {"configMapRef": {"name": "p", "format": "requests"}}}
    assert cel.evaluate(rule, cm) is False
    one = B.SpeculativeBenchmarkSpec.model_validate({**cm, "matrix": {"contexts": [1], "concurrency": [1]}})
    assert one.prompts.plan() == {"kind": "requests", "path": "/etc/specdeploy/bench/prompts.jsonl"}
    assert B.Prompts(bundled="structured-output").plan() == {"kind": "requests", "name": "structured-output"}
