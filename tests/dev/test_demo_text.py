"""The demo's printed findings are cut at a word boundary, never mid-word."""

from __future__ import annotations

from specdeploy_dev.demo import clip


def test_clip_cuts_between_words_and_says_so():
    text = ("error TargetLayerOutOfRange at drafter $.dflash_config.target_layer_ids[4]: layer id 61 is outside the "
            "target's 61 layers; valid ids are 0..60. An off-by-one list loads cleanly")
    out = clip(text, 100)
    assert len(out) <= 100 and out.endswith(" ...")
    head = out[:-4]
    assert text.startswith(head) and text[len(head)] in " ,;:"  # the next character of the text ends a word
    assert clip("short", 100) == "short"
