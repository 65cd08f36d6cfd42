"""The shared libraries an ELF library names as needed (its DT_NEEDED entries), read
from its dynamic section: what the dynamic loader must find for it to load.

Read with the standard library only (no readelf, which a runner may lack), and by seeking:
a torch library is hundreds of megabytes, of which a few kilobytes are read."""

from __future__ import annotations

import struct
from pathlib import Path
from typing import BinaryIO

_MAGIC = b"\x7fELF"
_SHT_DYNAMIC = 6
_DT_NULL, _DT_NEEDED = 0, 1
# Section headers hold a handful of tables in a real library; a corrupt count is refused.
_MAX_SECTIONS = 1 << 16
_MAX_DYNAMIC_BYTES = 1 << 20


class NotElf(ValueError):
    """The file is no ELF object, or one whose tables do not hold together."""


def needed_libraries(path: Path) -> list[str]:
    """The DT_NEEDED names of the ELF object at path, in their order ([] for a static one)."""
    with path.open("rb") as file:
        ident = file.read(16)
        if len(ident) < 16 or ident[:4] != _MAGIC or ident[4] not in (1, 2) or ident[5] not in (1, 2):
            raise NotElf(f"{path}: not an ELF file")
        wide = ident[4] == 2
        order = "<" if ident[5] == 1 else ">"
        # e_shoff, e_shentsize, e_shnum from the rest of the ELF header.
        header = _read(file, 16, 48 if wide else 36, path)
        if wide:
            shoff = struct.unpack_from(order + "Q", header, 24)[0]
            shentsize, shnum = struct.unpack_from(order + "HH", header, 42)
        else:
            shoff = struct.unpack_from(order + "I", header, 16)[0]
            shentsize, shnum = struct.unpack_from(order + "HH", header, 30)
        if shoff == 0 or shnum == 0:
            return []
        if shnum > _MAX_SECTIONS or shentsize < (64 if wide else 40):
            raise NotElf(f"{path}: its section header table is malformed")
        sections = [_section(_read(file, shoff + i * shentsize, shentsize, path), wide, order) for i in range(shnum)]
        names: list[str] = []
        for kind, offset, size, link in sections:
            if kind != _SHT_DYNAMIC:
                continue
            if size > _MAX_DYNAMIC_BYTES or link >= len(sections):
                raise NotElf(f"{path}: its dynamic section is malformed")
            _, str_offset, str_size, _ = sections[link]
            strings = _read(file, str_offset, str_size, path)
            entry = 16 if wide else 8
            table = _read(file, offset, size - size % entry, path)
            for at in range(0, len(table), entry):
                tag, value = struct.unpack_from(order + ("qQ" if wide else "iI"), table, at)
                if tag == _DT_NULL:
                    break
                if tag == _DT_NEEDED:
                    end = strings.find(b"\0", value)
                    if value >= len(strings) or end < 0:
                        raise NotElf(f"{path}: a DT_NEEDED entry points outside its string table")
                    names.append(strings[value:end].decode("utf-8", "replace"))
        return names


def _section(raw: bytes, wide: bool, order: str) -> tuple[int, int, int, int]:
    """(sh_type, sh_offset, sh_size, sh_link) of one section header."""
    if wide:
        kind = struct.unpack_from(order + "I", raw, 4)[0]
        offset, size = struct.unpack_from(order + "QQ", raw, 24)
        link = struct.unpack_from(order + "I", raw, 40)[0]
    else:
        kind = struct.unpack_from(order + "I", raw, 4)[0]
        offset, size, link = struct.unpack_from(order + "III", raw, 16)
    return kind, offset, size, link


def _read(file: BinaryIO, offset: int, size: int, path: Path) -> bytes:
    file.seek(offset)
    data = file.read(size)
    if len(data) != size:
        raise NotElf(f"{path}: truncated (a table ends past the end of the file)")
    return data
