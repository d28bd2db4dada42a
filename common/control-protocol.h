/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * What zswapctl and the daemon agree on about the control socket: where it
 * is and how long a message may be. A request is one line of text, a
 * reply ends when the daemon closes the connection; the verbs and their
 * replies are described at the top of daemon/control.c and in zswapctl(8).
 */
#pragma once

/* Longest request accepted; anything longer is refused whole. */
#define CONTROL_REQUEST_MAX 256
/* Longest reply sent (a stats listing of many targets). */
#define CONTROL_REPLY_MAX (4u << 20)

/* Where the daemon listens unless told otherwise ($ZSWAPD_SOCKET, -s). */
#define CONTROL_SOCKET_DEFAULT "/run/zswapd/zswapd.sock"
