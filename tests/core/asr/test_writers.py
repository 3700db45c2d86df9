"""The transcript writers, on a transcript made by hand: no model needed."""
from dasllama.core.asr.decode import Segment, Transcript
from dasllama.core.asr.writers import render_srt, render_tsv, render_txt, render_vtt


def test_render_formats_without_a_model():
    segs = [Segment(0.0, 1.5, " Hello.", [], 0, 0, 0, 0), Segment(61.25, 3725.004, " Bye.", [], 0, 0, 0, 0)]
    t = Transcript(segs, "en", 3726.0)
    assert render_txt(t) == "Hello.\nBye.\n"
    assert render_srt(t).splitlines()[5] == "00:01:01,250 --> 01:02:05,004"
    assert render_vtt(t).splitlines()[:3] == ["WEBVTT", "", "00:00.000 --> 00:01.500"]
    assert render_tsv(t).splitlines() == ["start\tend\ttext", "0\t1500\tHello.", "61250\t3725004\tBye."]
