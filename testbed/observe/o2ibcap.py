"""The emulated o2ib fabric in a capture: a Lua dissector for tshark/Wireshark (issue 28).

Theory of operation: an ``o2ib`` net here is emulated (docs/o2ib.md): its IB packets travel
as ``nodes/o2ib/vwire.py`` frames over TCP between the nodes' ``ib*`` addresses, port 987
(ko2iblnd's ``service``). Stock Wireshark has no idea of that framing, so a capture shows
bare TCP. ``O2IB_LUA`` is the project's own dissector for it, named ``o2ibemu`` and titled
as an emulation (it is not InfiniBand: no LRH/BTH, no ICRC; the kinds, sequence numbers,
keys and NAK syndromes are the emulation's own). It reassembles the TCP stream into frames
(``u32`` length, ``u8`` kind, the kind's little-endian fields) and hands the payloads that
are real o2iblnd bytes to Wireshark's own LNet dissector (epan/dissectors/packet-lnet.c,
registered as a heuristic for InfiniBand payloads and CM private data): a SEND's payload is a
``struct kib_msg`` (IMMEDIATE with its LNet header, PUT_REQ/ACK/DONE, GET_REQ/DONE, NOOP),
a CM REQ's/REP's private data a CONNREQ/CONNACK. What that heuristic does not take stays
``data``. A frame longer than the emulation allows or of an unknown kind is flagged
malformed. ``testbed capture --summary FILE --tshark`` loads it with the portal mapping of
``capture.DATA_PORTALS_LUA`` (``capture.tshark_check``), so o2ib frames count as LNet frames;
``python -m testbed.observe.o2ibcap > o2ibemu.lua`` writes it for an interactive Wireshark
(``wireshark -X lua_script:o2ibemu.lua``). Wireshark 4.0's LNet dissector reads a GET_REQ's
cookie and RDMA descriptor 4 bytes early (it does not skip the LNet header's padding after a
GET's fields; the frame is the 148 bytes ``kiblnd_msgtype2size`` gives) and flags it
malformed: that flag is Wireshark's, and ``tshark_check`` reports it as any other.
"""

from __future__ import annotations

from typing import Final

from nodes.o2ib.kibtx import IBLND_SERVICE
from nodes.o2ib.vwire import FIELD_SIZES, MAX_PACKET, Kind, Syndrome

#: the fixed-field sizes after the kind byte, from the codec itself
_FIXED_SIZES: Final = ", ".join(f"[{int(k)}]={n}" for k, n in FIELD_SIZES.items())
_KINDS: Final = ", ".join(f'[{int(k)}]="{k.name}"' for k in Kind)
_SYNDROMES: Final = ", ".join(f'[{int(s)}]="{s.name}"' for s in Syndrome)

O2IB_LUA: Final = f"""-- lnet-testbed: the EMULATED o2ib fabric (vwire.py), TCP {IBLND_SERVICE}.
-- An emulation, not InfiniBand: the o2iblnd messages inside are real (packet-lnet.c).
local p = Proto("o2ibemu", "lnet-testbed emulated IB (an emulation, not InfiniBand)")
local kinds = {{{_KINDS}}}
local syndromes = {{{_SYNDROMES}}}
local fixed = {{{_FIXED_SIZES}}}
local MAX = {MAX_PACKET}
local f = p.fields
f.len = ProtoField.uint32("o2ibemu.len", "Length")
f.kind = ProtoField.uint8("o2ibemu.kind", "Kind", base.DEC, kinds)
f.seq = ProtoField.uint32("o2ibemu.seq", "Sequence number")
f.rkey = ProtoField.uint32("o2ibemu.rkey", "R_Key", base.HEX)
f.addr = ProtoField.uint64("o2ibemu.addr", "Remote address", base.HEX)
f.dmalen = ProtoField.uint32("o2ibemu.dma_len", "DMA length")
f.syndrome = ProtoField.uint8("o2ibemu.syndrome", "NAK syndrome", base.DEC, syndromes)
f.reason = ProtoField.uint8("o2ibemu.cm_reason", "CM reject reason")
f.data = ProtoField.bytes("o2ibemu.data", "Data")
local e_bad = ProtoExpert.new("o2ibemu.malformed", "Malformed emulated IB frame",
                              expert.group.MALFORMED, expert.severity.ERROR)
p.experts = {{e_bad}}
local data = Dissector.get("data")

local function payload(list, tvb, pinfo, tree, t)
  if not DissectorTable.try_heuristics(list, tvb, pinfo, tree) then
    data:call(tvb, pinfo, t)
  end
end

local function frame(tvb, pinfo, tree, off, n)
  local t = tree:add(p, tvb(off, 4 + n))
  t:add_le(f.len, tvb(off, 4))
  local k = tvb(off + 4, 1):uint()
  t:add(f.kind, tvb(off + 4, 1))
  local name = kinds[k]
  if name == nil then
    t:add_proto_expert_info(e_bad, "unknown kind " .. k)
    return "kind " .. k
  end
  t:append_text(": " .. name)
  local fx = fixed[k] or 0
  if n < 1 + fx then
    t:add_proto_expert_info(e_bad, "short " .. name)
    return name
  end
  local b = off + 5
  if fx > 0 then t:add_le(f.seq, tvb(b, 4)) end
  if k == 11 or k == 12 then
    t:add_le(f.rkey, tvb(b + 4, 4))
    t:add_le(f.addr, tvb(b + 8, 8))
  end
  if k == 12 then t:add_le(f.dmalen, tvb(b + 16, 4)) end
  if k == 15 then t:add(f.syndrome, tvb(b + 4, 1)) end
  local d, dn = b + fx, n - 1 - fx
  if dn <= 0 then return name end
  if k == 10 then  -- SEND: a struct kib_msg
    payload("infiniband.payload", tvb(d, dn):tvb(), pinfo, tree, t)
  elseif k == 1 or k == 2 then  -- CM REQ/REP: CONNREQ/CONNACK
    payload("infiniband.mad.cm.private", tvb(d, dn):tvb(), pinfo, tree, t)
  elseif k == 4 then  -- CM REJ: the reason, then a kib_rej
    t:add(f.reason, tvb(d, 1))
    if dn > 1 then t:add(f.data, tvb(d + 1, dn - 1)) end
  else
    t:add(f.data, tvb(d, dn))
  end
  return name
end

function p.dissector(tvb, pinfo, tree)
  pinfo.cols.protocol = "o2ibemu"
  local off, len = 0, tvb:len()
  local names = {{}}
  while off < len do
    if len - off < 4 then
      pinfo.desegment_offset = off
      pinfo.desegment_len = DESEGMENT_ONE_MORE_SEGMENT
      break
    end
    local n = tvb(off, 4):le_uint()
    if n == 0 or n > MAX then
      local t = tree:add(p, tvb(off))
      t:add_proto_expert_info(e_bad, "frame length " .. n .. " not in 1.." .. MAX)
      break
    end
    if len - off < 4 + n then
      pinfo.desegment_offset = off
      pinfo.desegment_len = 4 + n - (len - off)
      break
    end
    names[#names + 1] = frame(tvb, pinfo, tree, off, n)
    off = off + 4 + n
  end
  if #names > 0 then
    pinfo.cols.info:prepend("[emulated IB " .. table.concat(names, ",") .. "] ")
  end
  return len
end

DissectorTable.get("tcp.port"):add({IBLND_SERVICE}, p)
"""


if __name__ == "__main__":
    print(O2IB_LUA, end="")
