#!/usr/bin/python3
"""Where loopback's bytes go, by kind, until SIGINT or SIGTERM (root: a
packet socket on lo). Prints one JSON object: every TCP packet's bytes
(Ethernet, IP and TCP headers included, as /sys/class/net/lo counts them),
the pure acks, the headers of segments that carry data, and the HTTP/2
frames in those segments by type (plaintext h2, as reckon's gRPC without
TLS; a frame split across segments is counted where it starts). Used for
docs/benchmarks.md "reckon against DDP" ("where reckon's bytes go"):

    tests/bench/loopback_bytes.py [PORT,PORT,...] > bytes.json &
    PYTHONPATH=build/python examples/torch/compare_ddp.py --runs reckon ...
    kill -INT %1
"""
import json
import signal
import socket
import struct
import sys

ETH_P_ALL = 3
FRAME_TYPES = {0: "DATA", 1: "HEADERS", 2: "PRIORITY", 3: "RST_STREAM", 4: "SETTINGS",
               5: "PUSH_PROMISE", 6: "PING", 7: "GOAWAY", 8: "WINDOW_UPDATE", 9: "CONTINUATION"}


def main():
    ports = {int(p) for p in sys.argv[1].split(",")} if len(sys.argv) > 1 else None
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(ETH_P_ALL))
    sock.bind(("lo", 0))
    sock.settimeout(0.2)
    stop = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.append(1))
    out = {"tcp_packets": 0, "tcp_bytes": 0, "ack_only_packets": 0, "ack_only_bytes": 0,
           "data_segment_header_bytes": 0, "h2_frames": {}, "h2_frame_bytes": {},
           "data_frames_of_100k_or_more": 0}
    while not stop:
        try:
            packet, address = sock.recvfrom(65536)
        except socket.timeout:
            continue
        # Loopback shows each packet twice, outgoing and incoming.
        if address[2] == socket.PACKET_OUTGOING or packet[12:14] != b"\x08\x00":
            continue
        ip_header = (packet[14] & 15) * 4
        if packet[23] != 6:  # not TCP
            continue
        tcp = 14 + ip_header
        source, destination = struct.unpack("!HH", packet[tcp:tcp + 4])
        if ports and source not in ports and destination not in ports:
            continue
        out["tcp_packets"] += 1
        out["tcp_bytes"] += len(packet)
        payload = packet[tcp + (packet[tcp + 12] >> 4) * 4:]
        if not payload:
            out["ack_only_packets"] += 1
            out["ack_only_bytes"] += len(packet)
            continue
        out["data_segment_header_bytes"] += len(packet) - len(payload)
        at = 0
        while at + 9 <= len(payload):
            length = int.from_bytes(payload[at:at + 3], "big")
            kind = FRAME_TYPES.get(payload[at + 3])
            if kind is None:  # not HTTP/2 (gloo, the preface) or mid-frame
                break
            out["h2_frames"][kind] = out["h2_frames"].get(kind, 0) + 1
            out["h2_frame_bytes"][kind] = out["h2_frame_bytes"].get(kind, 0) + 9 + length
            if kind == "DATA" and length >= 100_000:
                out["data_frames_of_100k_or_more"] += 1
            at += 9 + length
    print(json.dumps(out))


if __name__ == "__main__":
    main()
