#!/usr/bin/env python3
"""An out-of-path checker for bench/fw-proxy.sh (NFQ=1): the bare cost of
an NFQUEUE verdict on a flow's first data packet with a connmark bypass
for the rest. Binds queue QUEUE (raw netlink, no libraries); every queued
packet is accepted; the first one carrying TCP payload (the ClientHello)
is accepted with mark 1, which mangle POSTROUTING saves to the
connection, so mangle OUTPUT's connmark rule lets the rest of the flow by
without reaching user space. No check is made here: the numbers only.
"""
import socket
import struct
import sys

NETLINK_NETFILTER = 12
NFQ = 3 << 8  # NFNL_SUBSYS_QUEUE
MSG_PACKET, MSG_VERDICT, MSG_CONFIG = 0, 1, 2
NLM_F_REQUEST, NLM_F_ACK = 1, 4


def attr(kind, data):
    n = 4 + len(data)
    return struct.pack("=HH", n, kind) + data + b"\0" * ((4 - n % 4) % 4)


def msg(kind, queue, body, flags=NLM_F_REQUEST):
    payload = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + body
    return struct.pack("=IHHII", 16 + len(payload), NFQ | kind, flags, 0, 0) + payload


def main():
    queue = int(sys.argv[1]) if len(sys.argv) > 1 else 0
    s = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    s.bind((0, 0))
    # NFQNL_CFG_CMD_BIND, then copy the packet (a checker reads the hello).
    s.send(msg(MSG_CONFIG, queue, attr(1, struct.pack("=BBH", 1, 0, 0)), NLM_F_REQUEST | NLM_F_ACK))
    s.recv(4096)
    s.send(msg(MSG_CONFIG, queue, attr(2, struct.pack(">IB", 65535, 2)), NLM_F_REQUEST | NLM_F_ACK))
    s.recv(4096)
    print("ready", flush=True)
    marked = 0
    while True:
        buf = s.recv(262144)
        off = 0
        while off + 16 <= len(buf):
            n, kind = struct.unpack_from("=IH", buf, off)
            if n < 16:
                break
            if kind == NFQ | MSG_PACKET:
                pid, payload = None, b""
                a = off + 20
                while a + 4 <= off + n:
                    alen, atype = struct.unpack_from("=HH", buf, a)
                    if alen < 4:
                        break
                    data = buf[a + 4 : a + alen]
                    if atype & 0x7FFF == 1:  # NFQA_PACKET_HDR
                        pid = struct.unpack_from(">I", data)[0]
                    elif atype & 0x7FFF == 10:  # NFQA_PAYLOAD
                        payload = data
                    a += (alen + 3) & ~3
                if pid is not None:
                    body = attr(2, struct.pack(">II", 1, pid))  # NF_ACCEPT
                    ihl = (payload[0] & 15) * 4 if payload else 0
                    if payload and len(payload) >= ihl + 13:
                        tot = struct.unpack_from(">H", payload, 2)[0]
                        doff = (payload[ihl + 12] >> 4) * 4
                        if tot - ihl - doff > 0:
                            body += attr(3, struct.pack(">I", 1))  # NFQA_MARK
                            marked += 1
                    s.send(msg(MSG_VERDICT, queue, body))
            off += (n + 3) & ~3


if __name__ == "__main__":
    main()
