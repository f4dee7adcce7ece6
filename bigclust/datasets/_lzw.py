"""Unix ``compress`` (.Z) decoding for the UCI shuttle training file, streamed (no external tool)."""
from __future__ import annotations

import io

from bigclust._util.errors import DataError


class _LZWReader(io.RawIOBase):
    """Streaming decoder of Unix ``compress`` (.Z) files, as ncompress writes them.

    Layout: magic ``1f 9d``, a flags byte (low 5 bits: largest code width,
    0x80: "block mode", code 256 clears the table), then LZW codes packed
    least-significant bit first, starting at 9 bits.  Codes travel in groups
    of eight (``n_bits`` bytes); when the width grows or the table is cleared
    the writer pads the group to its end, so the reader drops the rest of the
    group too -- the quirk that makes naive LZW decoders fail on real files.
    """

    def __init__(self, raw, path):
        super().__init__()
        self._raw, self._path = raw, path
        head = raw.read(3)
        if len(head) < 3 or head[:2] != b"\x1f\x9d":
            raw.close()
            raise DataError(f"{path}: not a Unix compress (.Z) file "
                            f"(magic number {head[:2].hex() or 'missing'}, expected 1f9d)")
        self._maxbits, self._block_mode = head[2] & 0x1F, bool(head[2] & 0x80)
        if not 9 <= self._maxbits <= 16:
            raw.close()
            raise DataError(f"{path}: unsupported .Z code width {self._maxbits} (expected 9..16)")
        self._out, self._pos, self._chunks = b"", 0, self._decode()

    def readable(self):
        return True

    def readinto(self, b):
        while self._pos >= len(self._out):
            nxt = next(self._chunks, None)
            if nxt is None:
                return 0
            self._out, self._pos = nxt, 0
        n = min(len(b), len(self._out) - self._pos)
        b[:n] = self._out[self._pos:self._pos + n]
        self._pos += n
        return n

    def close(self):
        self._raw.close()
        super().close()

    def _decode(self):
        raw, maxbits, block_mode = self._raw, self._maxbits, self._block_mode
        maxmaxcode = 1 << maxbits
        first = 257 if block_mode else 256
        # table[code] is the byte string of the code; len(table) is the next
        # free code ("free_ent").  Slot 256 is a placeholder for CLEAR.
        table = [bytes((i,)) for i in range(256)] + [b""] * (first - 256)
        n_bits, maxcode = 9, 511     # ncompress starts at 511 whatever maxbits is
        prev, out, offset = None, bytearray(), 3
        while True:
            if len(table) > maxcode:
                n_bits += 1
                maxcode = maxmaxcode if n_bits == maxbits else (1 << n_bits) - 1
            group = raw.read(n_bits)
            if not group:
                break
            bits, mask = int.from_bytes(group, "little"), (1 << n_bits) - 1
            for i in range(len(group) * 8 // n_bits):
                if i and len(table) > maxcode:
                    break                               # width grows: rest of group is padding
                code = (bits >> (i * n_bits)) & mask
                if code == 256 and block_mode:
                    del table[first:]
                    n_bits, maxcode, prev = 9, 511, None
                    break                               # CLEAR: rest of group is padding
                if code < len(table) and (prev is not None or code < 256):
                    s = table[code]
                elif code == len(table) and prev is not None:
                    s = prev + prev[:1]                 # the KwKwK case
                else:
                    raise DataError(f"{self._path}: corrupt .Z data: code {code} near compressed "
                                    f"byte {offset} is not defined yet")
                if prev is not None and len(table) < maxmaxcode:
                    table.append(prev + s[:1])
                out += s
                prev = s
            offset += len(group)
            if len(out) >= 1 << 16:
                yield bytes(out)
                out.clear()
        if out:
            yield bytes(out)
