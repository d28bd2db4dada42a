/* SPDX-License-Identifier: LGPL-2.1-or-later */
/*
 * The page size, one constant for the engine, the daemon and the tests:
 * every page the engine stores, copies, counts or reports is this many
 * bytes, and zsw_engine_new() refuses a machine whose pages differ. A
 * buffer of one page and its alignment use it as well.
 */
#pragma once

#define ZSW_PAGE_SIZE 4096u
