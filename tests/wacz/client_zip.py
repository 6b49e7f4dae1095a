#!/usr/bin/env python3
"""Writes a ZIP the way client-zip does (browsertrix-crawler >= 1.x, ArchiveWeb.page): every
entry stored (method 0), flag bit 3 with zero CRC and sizes in its local header and no extra
field, a data descriptor with its signature after it (16 bytes, 24 with --zip64), and the
central directory after the last. With --zip64, sizes and offsets go in the central
directory's ZIP64 extra field and a ZIP64 end record and locator precede the end record, as
client-zip writes them past 4 GiB.

usage: client_zip.py OUT [--zip64] NAME=PATH...
"""
import struct
import sys
import zlib


def main():
    args = sys.argv[1:]
    out, zip64 = args[0], "--zip64" in args
    entries = [a.split("=", 1) for a in args[1:] if a != "--zip64"]
    body, central = bytearray(), bytearray()
    for name, path in entries:
        data = open(path, "rb").read()
        name = name.encode()
        crc = zlib.crc32(data)
        at = len(body)
        body += struct.pack("<IHHHHHIIIHH", 0x04034B50, 45 if zip64 else 20, 8, 0, 0, 0x21, 0, 0, 0, len(name), 0)
        body += name + data
        if zip64:
            body += struct.pack("<IIQQ", 0x08074B50, crc, len(data), len(data))
            extra = struct.pack("<HHQQQ", 1, 24, len(data), len(data), at)
            sizes = (0xFFFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF)
        else:
            body += struct.pack("<IIII", 0x08074B50, crc, len(data), len(data))
            extra = b""
            sizes = (len(data), len(data), at)
        central += struct.pack("<IHHHHHHIIIHHHHHII", 0x02014B50, 0x033F if zip64 else 0x0314, 45 if zip64 else 20,
                               8, 0, 0, 0x21, crc, sizes[0], sizes[1], len(name), len(extra), 0, 0, 0, 0o100644 << 16, sizes[2])
        central += name + extra
    cd_at, n = len(body), len(entries)
    body += central
    if zip64:
        end64 = len(body)
        body += struct.pack("<IQHHIIQQQQ", 0x06064B50, 44, 45, 45, 0, 0, n, n, len(central), cd_at)
        body += struct.pack("<IIQI", 0x07064B50, 0, end64, 1)
        body += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, 0xFFFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFF, 0)
    else:
        body += struct.pack("<IHHHHIIH", 0x06054B50, 0, 0, n, n, len(central), cd_at, 0)
    open(out, "wb").write(body)


if __name__ == "__main__":
    main()
