"""``lnet_legacy2yaml``: the legacy ``ip2nets=``, ``routes=`` and ``networks=`` module
parameters as the YAML ``lnetctl import`` reads (lustre/scripts/lnet_legacy2yaml in
lustre-release; sanity-lnet.sh tests 600-629).

Theory of operation: the inputs are read in a fixed order -- modprobe files (``-m``: their
``options lnet`` lines, ``\\`` continuations joined), ip2nets files (``-i``), routes files
(``-r``), networks files (``-n``), then the inline argument or stdin -- and each body parsed:

* an ip2nets body is rules separated by ``;`` or newlines (``#`` starts a comment):
  ``net[(if,...)] pattern [pattern ...]``, a pattern being four dot-separated IP expressions
  (``10.0.0.*``, ``192.168.[1-2].[2,4]``), kept as written;
* a routes body is entries ``net [hop] gateway[:priority]`` (hop 1..255; more than one
  gateway means a missing ``;``) or ``net: { gateway: G[, hop: H][, priority: P] }``;
* a networks body is ``net[(if,...)]`` items separated by commas outside parentheses.

An inline argument without ``ip2nets=``/``routes=``/``networks=`` assignments is an ip2nets
body. ``--default-hop [N]`` gives routes without a hop count N (1). The result is printed as
``net:``, ``ip2nets:`` and ``route:`` sections in lnetctl's layout. Exit status: 0, 1 when
there is nothing to convert, 2 for a malformed input (one ``Error: ...`` line on stderr).
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field

_ASSIGN = re.compile(r"(ip2nets|routes|networks)\s*=\s*(['\"])(.*?)\2", re.S)
_ASSIGN_BARE = re.compile(r"(ip2nets|routes|networks)\s*=\s*([^'\";\n][^\n;]*?)"
                          r"(?=\s+\w+\s*=|\s*;|\s*$)", re.S)
_NETSPEC = re.compile(r"^([A-Za-z][A-Za-z0-9]*)(?:\(([A-Za-z0-9_,.:/-]+)\))?$")
_IP_PART = r"[A-Za-z0-9\[\]*.,/-]+"
_IP_PATTERN = re.compile(rf"^{_IP_PART}\.{_IP_PART}\.{_IP_PART}\.{_IP_PART}$")
_ALT_ROUTE = re.compile(r"^([A-Za-z][A-Za-z0-9]*)\s*:\s*\{\s*gateway:\s*([^\s,}]+)"
                        r"(?:\s*,\s*(.*?))?\s*\}$")


class ConvertError(ValueError):
    """A malformed input: exit status 2."""


@dataclass
class Converted:
    nets: list[tuple[str, list[str]]] = field(default_factory=list)
    rules: list[tuple[str, list[str], list[str]]] = field(default_factory=list)
    routes: list[dict[str, object]] = field(default_factory=list)


def _entries(body: str) -> list[str]:
    body = body.replace("\\\n", " ")
    return [e.split("#", 1)[0].strip() for e in re.split(r"[;\n]", body)
            if e.split("#", 1)[0].strip()]


def _ifaces(text: str | None, where: str) -> list[str]:
    if text is None:
        return []
    out = [i.strip() for i in text.split(",") if i.strip()]
    if not out:
        raise ConvertError(f"empty interface list in '{where}'")
    return out


def ip2nets(body: str, out: Converted) -> None:
    for rule in _entries(body):
        head, _, rest = rule.partition(" ")
        m = _NETSPEC.match(head)
        patterns = rest.split()
        if m is None or not patterns:
            raise ConvertError(f"ip2nets rule '{rule}' needs a net and at least one IP pattern")
        for tok in patterns:
            if _IP_PATTERN.match(tok):
                continue
            if _NETSPEC.match(tok):
                raise ConvertError(f"'{tok}' in '{rule}' looks like a second net: Multiple "
                                   "network rules must be separated by ';'")
            raise ConvertError(f"invalid IP pattern '{tok}' in ip2nets rule '{rule}'")
        out.rules.append((m.group(1), _ifaces(m.group(2), rule), patterns))


def _hop(text: str, where: str) -> int:
    if not text.isdigit():
        raise ConvertError(f"routes: invalid hop value '{text}' in '{where}'")
    if not 1 <= int(text) <= 255:
        raise ConvertError(f"routes: hopcount {int(text)} out of range 1-255 in '{where}'")
    return int(text)


def routes(body: str, out: Converted) -> None:
    for entry in _entries(body):
        alt = _ALT_ROUTE.match(entry)
        if alt is not None:
            route: dict[str, object] = {"net": alt.group(1), "gateway": alt.group(2)}
            for item in (alt.group(3) or "").split(","):
                key, colon, value = (x.strip() for x in item.partition(":"))
                if colon and key == "hop":
                    route["hop"] = _hop(value, entry)
                elif colon and key == "priority":
                    if not value.lstrip("-").isdigit():
                        raise ConvertError(f"routes: invalid priority '{value}' in '{entry}'")
                    route["priority"] = int(value)
            out.routes.append(route)
            continue
        words = entry.split()
        if len(words) < 2:
            raise ConvertError(f"routes: '{entry}' needs a net and a gateway")
        route = {"net": words[0]}
        gws = words[1:]
        if re.fullmatch(r"[0-9]{1,3}", gws[0]):
            route["hop"] = _hop(gws[0], entry)
            gws = gws[1:]
        if not gws:
            raise ConvertError(f"routes: no gateway in '{entry}'")
        if len(gws) > 1:
            raise ConvertError(f"routes: multiple gateway specifications found in '{entry}' "
                               f"({', '.join(gws)}): separate routes with ';'")
        gw, prio = gws[0], None
        if "@" in gw and ":" in gw and gw.rsplit(":", 1)[1].isdigit():
            gw, prio = gw.rsplit(":", 1)
        route["gateway"] = gw
        if prio is not None:
            route["priority"] = int(prio)
        out.routes.append(route)


def networks(body: str, out: Converted) -> None:
    items, depth, cur = [], 0, ""
    for ch in body.replace("\\\n", " ").strip():
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            items.append(cur.strip())
            cur = ""
        else:
            cur += ch
    items.append(cur.strip())
    for item in (i for i in items if i):
        m = _NETSPEC.match(item)
        if m is None:
            raise ConvertError(f"Invalid network specification '{item}'")
        out.nets.append((m.group(1), _ifaces(m.group(2), item)))


_PARSERS = {"ip2nets": ip2nets, "routes": routes, "networks": networks}


def assignments(text: str) -> list[tuple[str, str]]:
    """The ``ip2nets=``/``routes=``/``networks=`` bodies of an options line, quoted ones
    first, then unquoted ones of the names not seen quoted."""
    found = [(m.group(1), m.group(3)) for m in _ASSIGN.finditer(text)]
    quoted = {name for name, _ in found}
    found += [(m.group(1), m.group(2).strip()) for m in _ASSIGN_BARE.finditer(text)
              if m.group(1) not in quoted]
    return found


def modprobe(text: str, out: Converted) -> None:
    """``options lnet ...`` lines of a modprobe file (continuations joined)."""
    for line in re.sub(r"\\\s*\n\s*", " ", text).splitlines():
        line = line.strip()
        if line.startswith("options") and "lnet" in line:
            for name, body in assignments(line):
                _PARSERS[name](body, out)


def _q(text: str) -> str:
    return f'"{text}"' if text.startswith("*") else text  # a leading * is a YAML alias


def render(conv: Converted) -> str:
    lines: list[str] = []
    if conv.nets:
        lines.append("net:")
        for net, ifs in conv.nets:
            lines.append(f"    - net type: {net}")
            if ifs:
                lines += ["      local NI(s):", "        - interfaces:"]
                lines += [f"              {i}: {n}" for i, n in enumerate(ifs)]
    if conv.rules:
        lines.append("ip2nets:")
        for net, ifs, pats in conv.rules:
            lines.append(f"    - net-spec: {net}")
            if ifs:
                lines += ["      interfaces:"] + [f"          {i}: {n}" for i, n in
                                                  enumerate(ifs)]
            lines += ["      ip-range:"] + [f"          {i}: {_q(p)}" for i, p in
                                            enumerate(pats)]
    if conv.routes:
        lines.append("route:")
        for r in conv.routes:
            lines += [f"    - net: {r['net']}", f"      gateway: {r['gateway']}"]
            lines += [f"      {k}: {r[k]}" for k in ("hop", "priority") if k in r]
    return "".join(line + "\n" for line in lines)


def _read(path: str) -> str:
    """An input file, bounded like an import file (``MAX_IMPORT_BYTES``)."""
    from nodes.limits import MAX_IMPORT_BYTES

    with open(path, encoding="utf-8", errors="replace") as f:
        text = f.read(MAX_IMPORT_BYTES + 1)
    if len(text) > MAX_IMPORT_BYTES:
        raise ConvertError(f"{path}: more than {MAX_IMPORT_BYTES} bytes")
    return text


def convert(argv: list[str], stdin: str | None) -> tuple[int, str, str]:
    """Run the converter on ``argv`` (without the program name): (status, stdout, stderr)."""
    from nodes.dlc import getopt

    longs = (getopt.LongOpt("ip2nets", getopt.REQUIRED, "i"),
             getopt.LongOpt("routes", getopt.REQUIRED, "r"),
             getopt.LongOpt("networks", getopt.REQUIRED, "n"),
             getopt.LongOpt("modprobe", getopt.REQUIRED, "m"),
             getopt.LongOpt("output", getopt.REQUIRED, "o"),
             getopt.LongOpt("default-hop", getopt.OPTIONAL, "H"))
    try:
        opts, inline = getopt.parse("lnet_legacy2yaml", argv, "i:r:n:m:o:", longs,
                                    {"H": lambda w: w.lstrip("-").isdigit()})
    except getopt.GetoptError as e:
        return 1, "", e.message + "\n"
    if len(inline) > 1:
        return 1, "", f"lnet_legacy2yaml: unexpected argument '{inline[1]}'\n"
    conv = Converted()
    try:
        for kind in "mirn":  # modprobe files, then -i, -r, -n files, in that order
            for o, path in opts:
                if o == kind:
                    text = _read(path or "")
                    if kind == "m":
                        modprobe(text, conv)
                    else:
                        {"i": ip2nets, "r": routes, "n": networks}[kind](text, conv)
        raw = inline[0] if inline else stdin
        if raw:
            found = assignments(raw)
            for name, body in found:
                _PARSERS[name](body, conv)
            if not found:
                ip2nets(raw, conv)
    except (ConvertError, OSError) as e:
        return 2, "", f"Error: {e}\n"
    if not (conv.nets or conv.rules or conv.routes):
        return 1, "", ("Error: no ip2nets, routes, or networks data provided (use -m/-i/-r/-n, "
                       "an inline argument or stdin)\n")
    hops = [v for o, v in opts if o == "H"]
    if hops:
        hop = int(hops[-1].lstrip("\0")) if hops[-1] else 1
        if not 1 <= hop <= 255:
            return 2, "", f"Error: --default-hop value {hop} out of range (1-255)\n"
        for r in conv.routes:
            r.setdefault("hop", hop)
    text = render(conv)
    out = [v for o, v in opts if o == "o"]
    if out:
        try:
            with open(out[-1] or "", "w", encoding="utf-8") as f:
                f.write(text)
        except OSError as e:
            return 2, "", f"Error: cannot write {out[-1]}: {e.strerror}\n"
        return 0, "", ""
    return 0, text, ""


def main() -> int:
    stdin = None if sys.stdin.isatty() else sys.stdin.read(1 << 22)
    rc, out, err = convert(sys.argv[1:], stdin)
    sys.stdout.write(out)
    sys.stderr.write(err)
    return rc


if __name__ == "__main__":
    sys.exit(main())
