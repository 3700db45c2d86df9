"""whisper.cpp's segment rules applied to our sampled tokens, its end-of-audio stop, and the
comparison of two reported streams: no model needed."""
from dasllama.core.tools.verify_asr import T0, our_entries, ref_entries, whisper_segments
from dasllama.core.asr.decode import MIN_FRAMES, Step, WindowTrace, end_timestamp
from dasllama.core.tools.ref_whisper import RefSegment
from dasllama.core.asr.tokenizer import WhisperTokenizer

TOK = WhisperTokenizer([bytes([65 + i % 26]) for i in range(50256)], 51864)   # tiny.en's layout
BEG, EOT = TOK.timestamp_begin, TOK.eot


def ts(seconds):
    return BEG + round(seconds / 0.02)


def test_segments_drop_opening_timestamps_and_take_their_times():
    tokens = [ts(0), 10, 11, ts(3), ts(3.4), 12, ts(6), ts(6), 13, 14]   # text after the last ts
    segs = whisper_segments(tokens, 0, TOK, timestamps=True)
    assert [(t0, t1) for t0, t1, *_ in segs] == [(0, 300), (340, 600)]
    assert [[t for _, t in toks] for _, _, toks, _ in segs] == [[ts(0), 10, 11, ts(3)], [12, ts(6)]]
    assert [step for *_, step in segs] == [0, 4]             # where each start time was sampled
    late = whisper_segments([ts(0.4), 10, ts(1)], 1500, TOK, timestamps=True)
    assert late[0][:2] == (1500 + 40, 1500 + 100) and [t for _, t in late[0][2]] == [10, ts(1)]


def test_segments_without_timestamps_are_one():
    (seg,) = whisper_segments([10, 11, 12], 0, TOK, timestamps=False)
    assert [t for _, t in seg[2]] == [10, 11, 12]


def test_end_of_audio_timestamp_is_within_100_ms():
    # 10 s of audio: frames 0..998 as whisper.cpp counts; the window stops at a timestamp t
    # with 2 * (t - BEG) + MIN_FRAMES >= 999, so at <|9.90|> and later, not at <|9.88|>
    end = end_timestamp(TOK, 0, 999)
    assert 2 * (end - BEG) + MIN_FRAMES >= 999 > 2 * (end - 1 - BEG) + MIN_FRAMES
    assert end_timestamp(TOK, 0, 5) == BEG + 1                # never <|0.00|>


def test_streams_compare_start_times_and_tokens():
    steps = [Step([t, 0], [1.0, 0.5]) for t in range(12)]
    trace = [WindowTrace(0, [ts(0), 10, ts(2), ts(2), 11, ts(4)], steps),
             WindowTrace(400, [ts(0), 99, ts(1)], steps, kept=False)]
    ours = our_entries(trace, TOK, timestamps=True)
    ref = ref_entries([RefSegment(0, 200, "x", [ts(0), 10, ts(2)]),
                       RefSegment(200, 400, "y", [11, ts(4)])], timestamps=True)
    assert [e.key for e in ours] == [e.key for e in ref]
    assert [(e.segment, e.index) for e in ours if e.kind == T0] == [(0, -1), (1, -1)]
    assert ours[4].step == 3                                  # segment 1's start: the 2nd <|2.00|>
