#!/usr/bin/python3
"""Generate tok_unicode.h: the Unicode tables tok.h needs, from the Unicode Character Database.

Usage: tools/gen_unicode_tables.py [UCD_DIR] [OUTPUT]
       (defaults: /usr/share/unicode from Debian's `unicode-data` package, ./tok_unicode.h)

Tables written (all sorted, searched by binary search in tok.h):
  tok_latin1_class  category group and White_Space bit of U+0000..U+00FF (a direct table).
  tok_cat_ranges   general-category group of every assigned code point: L, N, P, S, M
                   (everything else -- C*, Z*, unassigned -- is "other"); adjacent code points of
                   the same group are merged into one range.
  tok_space_ranges the White_Space property (PropList.txt), i.e. the regex class \\s.
  tok_ccc_ranges   canonical combining class, non-zero values only (for NFC).
  tok_decomp       canonical decomposition mappings (one or two code points; Hangul excluded,
                   it is algorithmic).
  tok_comp         primary composites for NFC: (first, second) -> composite, without the
                   Full_Composition_Exclusion code points.
  tok_nfc_qc_ranges  code points whose NFC_Quick_Check is No or Maybe.

The tables come from the data files only; nothing is hand-written.
"""
import argparse
import os
import sys

from tool_help import HelpFormatter

ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=HelpFormatter)
ap.add_argument("ucd", nargs="?", default="/usr/share/unicode", metavar="UCD_DIR",
                help="the Unicode Character Database (Debian package unicode-data)")
ap.add_argument("out_path", nargs="?", metavar="OUTPUT", help="the header to write (default: tok_unicode.h at "
                "the top of the repository)",
                default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tok_unicode.h"))
args = ap.parse_args()
ucd, out_path = args.ucd, args.out_path


def ucd_file(name):
    path = os.path.join(ucd, name)
    if not os.path.exists(path):
        sys.exit(f"gen_unicode_tables: missing {path} (install Debian package unicode-data)")
    return path


def read_version():
    with open(ucd_file("ReadMe.txt"), encoding="utf-8") as f:
        for line in f:
            if "Version" in line and "of the Unicode Standard" in line:
                for word in line.split():
                    if word[0].isdigit():
                        return word.rstrip(".").rstrip(",")
    return "unknown"


# ---- UnicodeData.txt: category, combining class, decomposition ----
GROUPS = {"L": 1, "N": 2, "P": 3, "S": 4, "M": 5}
category = {}      # cp -> group number (only L N P S M)
ccc = {}           # cp -> non-zero combining class
decomp = {}        # cp -> tuple of code points (canonical only)
with open(ucd_file("UnicodeData.txt"), encoding="utf-8") as f:
    range_start = None
    for line in f:
        fields = line.rstrip("\n").split(";")
        cp = int(fields[0], 16)
        name, gc, cc, dm = fields[1], fields[2], int(fields[3]), fields[5]
        if name.endswith(", First>"):
            range_start = cp
            continue
        first = range_start if name.endswith(", Last>") else cp
        range_start = None
        for c in range(first, cp + 1):
            g = GROUPS.get(gc[0])
            if g:
                category[c] = g
            if cc:
                ccc[c] = cc
        if dm and not dm.startswith("<"):
            decomp[cp] = tuple(int(x, 16) for x in dm.split())


def parse_property_file(name, wanted):
    """Yield code points listed with property `wanted` in a PropList-style file."""
    with open(ucd_file(name), encoding="utf-8") as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if not line:
                continue
            parts = [p.strip() for p in line.split(";")]
            if parts[1] != wanted[0] or (len(wanted) > 1 and (len(parts) < 3 or parts[2] not in wanted[1])):
                continue
            if ".." in parts[0]:
                lo, hi = (int(x, 16) for x in parts[0].split(".."))
            else:
                lo = hi = int(parts[0], 16)
            yield from range(lo, hi + 1)


white_space = set(parse_property_file("PropList.txt", ("White_Space",)))
comp_exclusion = set(parse_property_file("DerivedNormalizationProps.txt", ("Full_Composition_Exclusion",)))
nfc_qc_not_yes = set(parse_property_file("DerivedNormalizationProps.txt", ("NFC_QC", ("N", "M"))))
if not white_space or not comp_exclusion or not nfc_qc_not_yes:
    sys.exit("gen_unicode_tables: a property came out empty; unexpected UCD file format")


def ranges_of(mapping):
    """Merge a {cp: value} mapping into sorted (first, last, value) runs of consecutive code points."""
    runs = []
    for cp in sorted(mapping):
        v = mapping[cp]
        if runs and runs[-1][1] == cp - 1 and runs[-1][2] == v:
            runs[-1][1] = cp
        else:
            runs.append([cp, cp, v])
    return runs


cat_runs = ranges_of(category)
space_runs = ranges_of({c: 1 for c in white_space})
ccc_runs = ranges_of(ccc)
qc_runs = ranges_of({c: 1 for c in nfc_qc_not_yes})
decomp_rows = sorted((cp, d[0], d[1] if len(d) > 1 else 0) for cp, d in decomp.items())
comp_rows = sorted((d[0], d[1], cp) for cp, d in decomp.items()
                   if len(d) == 2 and cp not in comp_exclusion)

version = read_version()
lines = []
w = lines.append
w("/* tok_unicode.h -- GENERATED by tools/gen_unicode_tables.py from the Unicode Character")
w(f" * Database {version} (UnicodeData.txt, PropList.txt, DerivedNormalizationProps.txt). DO NOT EDIT;")
w(" * rerun the generator instead. Included by tok.h. All tables are sorted for binary search. */")
w("#ifndef TOK_UNICODE_H")
w("#define TOK_UNICODE_H")
w("#include <stdint.h>")
w(f'#define TOK_UNICODE_VERSION "{version}"')
w("/* tok_cat_ranges values: 1 L, 2 N, 3 P, 4 S, 5 M (= TOK_CAT_* in tok.h); absent = other */")
w("typedef struct { uint32_t first, last; uint8_t value; } TokUniRange;")
w("typedef struct { uint32_t a, b, c; } TokUniTriple;")


def emit_rows(ctype, name, cells):
    """A C array of `ctype` from preformatted cells, six to a line."""
    w(f"static const {ctype} {name}[{len(cells)}] = {{")
    for i in range(0, len(cells), 6):
        w("  " + ",".join(cells[i:i + 6]) + ",")
    w("};")


def emit_ranges(name, runs):
    emit_rows("TokUniRange", name, [f"{{0x{lo:X},0x{hi:X},{v}}}" for lo, hi, v in runs])


def emit_triples(name, rows, comment):
    w(f"/* {comment} */")
    emit_rows("TokUniTriple", name, [f"{{0x{a:X},0x{b:X},0x{c:X}}}" for a, b, c in rows])


# Direct table for U+0000..U+00FF so Latin text never reaches a binary search:
# low 3 bits category group, bit 3 White_Space.
latin1 = [category.get(c, 0) | (8 if c in white_space else 0) for c in range(256)]
w("/* U+0000..U+00FF: category group in bits 0-2, White_Space in bit 3 */")
w("static const uint8_t tok_latin1_class[256] = {")
for i in range(0, 256, 32):
    w("  " + ",".join(str(v) for v in latin1[i:i + 32]) + ",")
w("};")
emit_ranges("tok_cat_ranges", cat_runs)
emit_ranges("tok_space_ranges", space_runs)
emit_ranges("tok_ccc_ranges", ccc_runs)
emit_ranges("tok_nfc_qc_ranges", qc_runs)
emit_triples("tok_decomp", decomp_rows, "code point -> canonical decomposition (second = 0 for singletons)")
emit_triples("tok_comp", comp_rows, "(first, second) -> primary composite, sorted by (first, second)")
w("#endif")

with open(out_path, "w", encoding="ascii") as f:
    f.write("\n".join(lines) + "\n")
print(f"wrote {out_path}: {len(cat_runs)} category ranges, {len(space_runs)} space ranges, "
      f"{len(ccc_runs)} ccc ranges, {len(qc_runs)} NFC_QC ranges, {len(decomp_rows)} decompositions, "
      f"{len(comp_rows)} compositions (Unicode {version})")
