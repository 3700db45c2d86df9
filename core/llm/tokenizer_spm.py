"""SentencePiece-style BPE as llama.cpp runs it (llm_tokenizer_spm): start from one symbol per
codepoint and keep merging the adjacent pair whose union is the best-scoring token."""
import heapq


def merge(text, token_to_id, scores):
    """Symbols of `text` after merging, highest score first, ties leftmost."""
    symbols = list(text)
    n = len(symbols)
    nxt = [*range(1, n), -1]
    prv = list(range(-1, n - 1))
    queue = []

    def push(left, right):
        joined = symbols[left] + symbols[right]
        tid = token_to_id.get(joined)
        if tid is not None:
            heapq.heappush(queue, (-scores[tid], left, right, len(joined)))

    for i in range(n - 1):
        push(i, i + 1)
    while queue:
        _, left, right, size = heapq.heappop(queue)
        # a pair goes stale when either side was merged into something else since
        if not symbols[left] or not symbols[right] or len(symbols[left]) + len(symbols[right]) != size:
            continue
        symbols[left] += symbols[right]
        symbols[right] = ""
        after = nxt[right]
        nxt[left] = after
        if after >= 0:
            prv[after] = left
        if prv[left] >= 0:
            push(prv[left], left)
        if after >= 0:
            push(left, after)
    return [s for s in symbols if s]


def encode(text, token_to_id, scores, byte_ids, out):
    """Appends the ids of `text` (spaces already escaped to U+2581) to `out`; a symbol that
    is no token falls back to one <0xXX> token per UTF-8 byte."""
    for symbol in merge(text, token_to_id, scores):
        tid = token_to_id.get(symbol)
        if tid is not None:
            out.append(tid)
            continue
        for byte in symbol.encode("utf-8"):
            if byte_ids[byte] is None:
                raise ValueError(f"the vocabulary has no token for byte 0x{byte:02X}")
            out.append(byte_ids[byte])
