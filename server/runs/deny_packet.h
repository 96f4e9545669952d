/* SPDX-License-Identifier: Apache-2.0 */
/* A packet of an exec's connect watch, read (deny_packet.c). */
#ifndef SBX_DENY_PACKET_H
#define SBX_DENY_PACKET_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* pkt[0..n), from lo's link header on, as the watch's socket returns it
 * (its first SBX_DENY_WATCH_SNAP bytes): when it is the refusal of an
 * attempt, what was tried into name ("ADDRESS:PORT", "ADDRESS:PORT/udp"
 * or "/udplite", IPv6 in brackets; "ADDRESS (protocol N)") and true;
 * otherwise false. Read as hostile bytes. */
bool deny_packet_name(const uint8_t *pkt, size_t n, char *name, size_t name_size);

#endif
