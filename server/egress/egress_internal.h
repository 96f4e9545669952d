/* SPDX-License-Identifier: Apache-2.0 */
/* The proxy's private state, shared by its files and nothing else:
 *   egress.c         the thread, the command queue, the run API
 *   egress_conn.c    one connection's life: head, decision, answers, end
 *   egress_resolve.c the lookup (evdns) and the vetting of its addresses
 *   egress_connect.c the TCP connect to the vetted addresses
 *   egress_relay.c   splice(2) both ways, half-close, throttling, idleness
 *   egress_limits.c  rules and destinations: buckets and open counts
 *   egress_record.c  records, totals, alerts, audit lines, snapshots
 *
 * Who touches what: [loop] only the proxy's thread; [mu] under eg->mu;
 * [rec] under the run's rec_mu (the loop writes, Status reads); [once]
 * written before the run or the proxy is shared, constant after.
 *
 * Lifetime: a run is reference counted under eg->mu. Its owner (the run
 * manager) holds one from sbx_egress_run_open to sbx_egress_run_free,
 * eg->runs holds one until the loop closed it, and every queued command
 * holds one. Every connection and listener of a run is gone once the loop
 * closed the run, so nothing the loop keeps (events, lookups) points at a
 * run that may be freed. The proxy itself (its mutex, condvar and queue) is
 * reference counted too: its owner's reference and one per run, so a run
 * freed after sbx_egress_stop still finds the mutex it locks. */
#ifndef SBX_EGRESS_INTERNAL_H
#define SBX_EGRESS_INTERNAL_H

#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/socket.h>

#include <event2/dns.h>
#include <event2/event.h>

#include "egress.h"
#include "egress_bucket.h"
#include "egress_head.h"
#include "hostname.h"

/* A relayed connection holds six descriptors: the sandbox's socket, the
 * destination's, and a pipe (two ends) for each direction of splice(2)
 * (made when the direction first moves a byte); an exec's listener one.
 * connections_max is lowered, and listeners capped, so that all of them fit
 * in RLIMIT_NOFILE less the config's fd_reserve (the RPC side's and the
 * runs': sbx_rpc_fd_need), or in half of RLIMIT_NOFILE without one
 * (egress.c, fds_fit). */
#define EGRESS_FDS_PER_CONN 6
/* Distinct host:port totals kept per run; connections to further ones are
 * summed in one row (host "(other)", port 0), so a run asking for a
 * million names costs a bounded amount of memory. */
#define EGRESS_TOTALS_MAX  1024
#define EGRESS_OTHER_HOST  SBX_EGRESS_OTHER_HOST
#define EGRESS_ADDRS_MAX   16	     /* vetted addresses tried per connection */
#define EGRESS_LINGER_MS   1000	     /* a refused client's time to read its answer */
#define EGRESS_LINGER_MAX  (1 << 16) /* bytes read and dropped meanwhile */
#define EGRESS_PIPE_MAX	   (1 << 20) /* a bulk direction's pipe grows to this */
#define EGRESS_ACCEPT_MANY 32	     /* accepts per listener wakeup, for fairness */
#define EGRESS_PUMP_BUDGET (4 << 20) /* bytes one relay wakeup reads, for fairness */
#define EGRESS_REASON_MAX  24
/* An identity's egress lines take at most 1/EGRESS_LINES_SHARE_DIV of its
 * audit rate (quotas.audit_identity_kb_per_s) on average. They are written
 * whole and never dropped: the budget pauses the identity's accepts, it
 * cannot take back the close line a connection accepted already owes; the
 * rest of the rate is room for those and for the identity's other lines. */
#define EGRESS_LINES_SHARE_DIV 2

/* Grown pipe bytes host-wide when fs.pipe-user-pages-soft cannot be read
 * (a quarter of it otherwise); a run may hold a quarter of that. New
 * pipes at the kernel's default size have a budget of the same size (and
 * share); past it a new pipe has one page (EGRESS_PIPE_SMALL). A grown
 * pipe idle or not emptied for EGRESS_PIPE_REST_MS shrinks back. A relay
 * side that says readable and gives nothing rests, first for
 * EGRESS_READ_REST_MS, doubling up to EGRESS_READ_REST_MAX_MS. */
#define EGRESS_PIPE_BUDGET_DEFAULT (16 << 20)
#define EGRESS_PIPE_SMALL	   4096 /* a new pipe's size past the budget */
#define EGRESS_PIPE_REST_MS	   1000
#define EGRESS_READ_REST_MS	   10
#define EGRESS_READ_REST_MAX_MS	   250

struct egress_conn;

/* One allowlist entry of a run with its limits and their state. */
struct egress_rule {
	char host[SBX_HOSTNAME_BUF]; /* [once] normalized */
	enum sbx_host_kind kind;     /* [once] */
	uint16_t port;		     /* [once] */
	bool allow_private;	     /* [once] */
	uint32_t max_concurrent;     /* [once] 0: none */
	uint32_t connections_per_minute;
	uint64_t bytes_per_second;
	struct egress_bucket conns; /* [loop] in thousandths of a connection */
	struct egress_bucket bytes; /* [loop] */
	uint32_t open;		    /* [loop] connections holding it */
};

/* One host-wide destination of the config, across every run. Shared
 * fairly between identities (egress_limits.c): each holds at most its
 * share of max_concurrent, takes at most half of the per-minute bucket,
 * and its relays at most half the byte rate while another identity relays
 * to it too. */
struct egress_dest {
	char *host; /* [once] normalized, maybe "*.suffix" */
	enum sbx_host_kind kind;
	uint16_t port;
	uint32_t max_concurrent;
	uint32_t connections_per_minute;
	uint64_t bytes_per_second;
	struct egress_bucket conns; /* [loop] thousandths */
	struct egress_bucket bytes; /* [loop] */
	uint32_t open;		    /* [loop] */
	uint32_t holders;	    /* [loop] identities with an open connection to it */
};

/* One identity's part of a host-wide destination. */
struct egress_ident_dest {
	uint32_t open;		    /* its connections holding the destination */
	struct egress_bucket conns; /* half the destination's per-minute (thousandths) */
	struct egress_bucket bytes; /* half its rate, used while another identity relays */
};

/* One identity (sbx_egress_run_info.identity) across its runs: its share
 * of the host-wide pools. Made when its first run reaches the loop, freed
 * when its last run closed there ([loop] all of it): a run's connections
 * come and go, the identity's budgets stay while it has a run. */
struct egress_identity {
	char *name;	  /* "" for a run without one */
	uint32_t runs;	  /* its runs the loop holds */
	uint32_t n_conns; /* open connections of its runs, heads included */
	/* accepts_per_identity_per_second, burst twice: what its runs' listeners
	 * may accept together (each run's own bucket as well). */
	struct egress_bucket accepts;
	/* The audit bytes of its egress lines (written whole, never dropped):
	 * past them its runs' listeners pause, as for the accept budgets. */
	struct egress_bucket lines;
	uint64_t lines_debt;		 /* bytes written past what lines held */
	struct egress_ident_dest *dests; /* [eg->n_dests], NULL when none */
	struct egress_identity *next;
};

/* What Status and the audit log say of one connection. */
struct egress_record {
	int64_t time_unix_ms;
	char host[SBX_HOSTNAME_BUF];
	uint16_t port;
	bool allowed;
	bool open;
	uint64_t bytes_out, bytes_in;
	char reason[EGRESS_REASON_MAX];
	uint64_t connection;
	char address[INET6_ADDRSTRLEN + 8];
	uint32_t lookup_ms, connect_ms;
	uint64_t duration_ms;
	char method[16];
	uint32_t status;
};

/* A run's totals for one requested host:port. */
struct egress_total {
	char host[SBX_HOSTNAME_BUF];
	uint16_t port;
	uint64_t connections, denied, bytes_out, bytes_in;
};

struct egress_listener {
	struct sbx_egress_run *run;
	uint64_t exec_id;
	int fd;
	struct event *ev;
	bool dead; /* accept failed for good: never polled again */
	struct egress_listener *next;
};

struct sbx_egress_run {
	struct sbx_egress *eg;		    /* [once] holds a reference on it */
	int refs;			    /* [mu] */
	bool closed;			    /* [mu] the loop closed it (or never took it) */
	bool close_queued;		    /* [mu] */
	bool listed;			    /* [mu] on eg->runs */
	struct sbx_egress_run *prev, *next; /* [mu] eg->runs */

	char *run_id, *identity, *policy_digest; /* [once] */
	struct egress_rule *rules;		 /* [once], state [loop] */
	size_t n_rules;
	uint64_t alert_bytes, max_bytes; /* [once] 0: none */

	/* [loop] */
	struct egress_listener *listeners;
	struct egress_conn *conns; /* every open connection, heads included */
	uint32_t n_conns;
	uint64_t next_connection;
	struct egress_identity *ident; /* from the loop's first command to its close */
	struct egress_bucket accepts;  /* accepts_per_run_per_second, burst twice */
	struct event *accept_timer;    /* resumes paused listeners */
	bool accepts_paused;
	uint64_t bytes; /* moved both ways (after heads): alert_bytes, max_bytes */
	bool alerted, maxed;
	bool loop_closed; /* the loop closed it: listeners refused */

	/* [rec] */
	pthread_mutex_t rec_mu;
	struct egress_record *ring; /* closed (or refused) connections, oldest first */
	size_t ring_cap, ring_len, ring_start;
	uint64_t dropped;
	struct egress_conn *open_head; /* allowed and still relaying */
	struct egress_total *totals;
	size_t n_totals, totals_cap;
	int other_row;	 /* the "(other)" row, -1 until the rows ran out */
	char *alerts[2]; /* the alert_bytes and the max_bytes one */
	size_t n_alerts;

	/* [loop] egress_relay.c (eg-fix1): the run's pipes' bytes, each at
	 * most a quarter of eg->pipe_budget (past it: smaller pipes). */
	uint64_t pipe_grown; /* grown past their first size */
	uint64_t pipe_made;  /* their first sizes */
};

enum egress_cmd_kind { EGRESS_CMD_LISTEN, EGRESS_CMD_UNLISTEN, EGRESS_CMD_CLOSE, EGRESS_CMD_STOP };

struct egress_cmd {
	enum egress_cmd_kind kind;
	struct sbx_egress_run *run; /* holds a reference; NULL for STOP */
	uint64_t exec_id;
	int fd;
	struct egress_cmd *next;
};

struct sbx_egress {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	int refs;		 /* [mu] the owner's and one per run */
	bool taking;		 /* [mu] the loop takes commands */
	struct egress_cmd *cmds; /* [mu] in order */
	struct egress_cmd **cmds_tail;
	struct sbx_egress_run *runs; /* [mu] not yet closed by the loop */
	pthread_t thread;

	/* [once] */
	uint32_t head_seconds, lookup_seconds, connect_seconds, idle_seconds;
	uint32_t connections_per_run, connections_max, records_per_run;
	uint32_t listeners_max; /* exec listeners held at once */
	uint32_t accepts_per_run_per_second, accepts_per_identity_per_second;
	uint64_t lines_per_identity_per_second; /* audit bytes; 0: none */
	struct egress_dest *dests;
	size_t n_dests;

	/* [loop] (and start/stop while the thread does not run) */
	struct event_base *base;
	struct evdns_base *dns;
	bool have_nameservers;
	struct event *wake;
	uint32_t n_conns;
	uint32_t n_listeners;
	struct egress_identity *identities;
	uint32_t n_holding; /* identities with an open connection */

	/* [loop] egress_relay.c (eg-fix1): pipe pages are charged to sbxd's
	 * uid (fs.pipe-user-pages-soft), so grown pipes share one budget. */
	bool pipe_budget_known; /* pipe_budget read (at the first relay) */
	uint64_t pipe_budget;	/* grown (and apart: first) pipe bytes at most */
	uint64_t pipe_grown;	/* grown pipe bytes now (past their first size) */
	uint64_t pipe_made;	/* the relays' pipes' first sizes now */
	uint64_t read_rests;	/* readable sides that gave nothing and rested */
};

/* ---- egress_conn.c ---- */

enum egress_conn_state {
	EGRESS_HEAD,	/* reading the request head */
	EGRESS_RESOLVE, /* the name's lookup */
	EGRESS_CONNECT, /* connecting to a vetted address */
	EGRESS_RELAY,	/* both ways */
	EGRESS_ANSWER,	/* writing a refusal */
	EGRESS_LINGER,	/* after it: reading until the client closes */
};

/* One direction of a relay: src's bytes to dst, through a pipe. */
struct egress_dir {
	int src, dst;		 /* borrowed: the connection's sockets */
	struct event *src_ev;	 /* EV_READ on src */
	struct event *dst_ev;	 /* EV_WRITE on dst */
	bool src_on, dst_on;	 /* whether each is added */
	int pipe_r, pipe_w;	 /* made when a byte first moves (-1 before) */
	size_t pipe_len;	 /* bytes in the pipe */
	size_t pipe_cap;	 /* its size (F_GETPIPE_SZ) */
	size_t pipe_base;	 /* its size when made (the kernel's default) */
	size_t pipe_charged;	 /* pipe_cap - pipe_base: in the pipe budget */
	bool shrinking;		 /* grown, stalled: src waits until it is empty */
	int64_t grow_after_us;	 /* no growing before (a failed or undone one) */
	int64_t drained_us;	 /* the pipe was last empty */
	uint64_t checked_bytes;	 /* bytes as of the grown pipe's last check */
	struct event *pipe_ev;	 /* while grown: is it idle or stalled? */
	bool pipe_stalled;	 /* src had bytes the pipe took no more of */
	bool readable;		 /* this pump: src's read event fired */
	bool resting;		 /* src said readable and gave nothing: rest_ev */
	struct event *rest_ev;	 /* resting src is polled again */
	uint32_t rest_ms;	 /* the next rest (grows while nothing comes) */
	uint32_t empty_wakes;	 /* readable wakeups in a row that gave nothing */
	uint64_t rests;		 /* how often it rested */
	char *pre;		 /* written to dst before the pipe's bytes */
	size_t pre_len, pre_off; /* (the rewritten head, early bytes, the 200, */
				 /* an urgent byte read inline) */
	bool pre_counted;	 /* pre is relayed bytes: counted and rate limited */
	bool src_eof, dst_shut;	 /* half-close */
	bool throttled;		 /* a bucket is empty: src not read */
	uint64_t bytes;		 /* written to dst (counted ones) */
};

struct egress_lookup; /* egress_resolve.c */

struct egress_conn {
	struct sbx_egress *eg;
	struct sbx_egress_run *run;
	uint64_t exec_id;			   /* the exec whose listener accepted it */
	struct egress_conn *prev, *next;	   /* run->conns */
	struct egress_conn *open_prev, *open_next; /* [rec] run->open_head */
	enum egress_conn_state state;
	int cfd; /* the sandbox's end */
	int ufd; /* the destination's, -1 until connecting */
	struct event *cread, *cwrite, *uread, *uwrite;
	struct event *timer;	/* head, lookup, connect, linger, idle */
	struct event *throttle; /* relay: a bucket has tokens again */
	int64_t accept_us;
	int64_t last_us; /* relay: the last byte either way */

	char *buf; /* the head as read (EGRESS_HEAD_MAX), freed once relayed */
	size_t buf_len;
	struct egress_head head;
	bool head_parsed;

	int rule;	   /* index in run->rules, -1: none */
	int dest;	   /* index in eg->dests, -1: none */
	bool holds_limits; /* counted in rule/dest open */
	struct egress_lookup *lookup;
	int64_t lookup_start_us, connect_start_us;
	struct sockaddr_storage addrs[EGRESS_ADDRS_MAX];
	size_t n_addrs, next_addr;

	struct egress_dir dir[2]; /* 0: out (sandbox -> destination), 1: in */
	bool finishing_max;	  /* max_bytes reached: end once flushed */

	bool decided;		  /* its decision line is written */
	bool counted;		  /* in run->n_conns and eg->n_conns */
	size_t linger_read;	  /* bytes dropped while lingering */
	int total_row;		  /* [rec] index in run->totals, -1 before the decision */
	struct egress_record rec; /* [rec] once decided */
};

int64_t egress_now_us(void);
/* A new connection accepted on exec exec_id's listener of run's (fd owned
 * from here). */
void egress_conn_start(struct sbx_egress_run *run, uint64_t exec_id, int fd);
/* Refuses c: its decision line, the answer written, then lingering. */
void egress_conn_refuse(struct egress_conn *c, unsigned status, const char *reason,
			unsigned retry_after_s);
/* Ends c whatever its state (its records written) and frees it. */
void egress_conn_end(struct egress_conn *c, const char *reason);
/* Closes the destination's socket and frees its events (egress_connect.c). */
void egress_conn_drop_upstream(struct egress_conn *c);
/* The vetted addresses are in c->addrs: connect (egress_connect.c). */
void egress_conn_connect(struct egress_conn *c);
/* Connected to addrs[next_addr - 1]: the decision, then the relay. */
void egress_conn_connected(struct egress_conn *c);
void egress_conn_arm_timer(struct egress_conn *c, int64_t us);

/* ---- egress_resolve.c ---- */

/* Looks c's host up (or takes the IPv4 literal) and vets the addresses;
 * ends in egress_conn_connect or a refusal. */
void egress_resolve_start(struct egress_conn *c);
/* Drops c's lookup in flight (its callback then frees what it holds). */
void egress_resolve_cancel(struct egress_conn *c);

/* ---- egress_relay.c ---- */

/* Starts relaying (pipes, the idle timer); -1: c was ended. The caller
 * then pumps both directions, which takes the events each needs. */
int egress_relay_start(struct egress_conn *c);
/* Moves what can move in direction d now; -1: c was ended (freed). */
int egress_relay_pump(struct egress_conn *c, int d);
/* The same, woken by src's read event: a side that says readable and
 * gives nothing rests rather than spinning. */
int egress_relay_readable(struct egress_conn *c, int d);
/* max_bytes reached: c stops reading and ends once its pipes are empty. */
void egress_relay_max(struct egress_conn *c);
/* c's exec ended: what can move to the destination now is moved, then c
 * ends ("exec_ended"; or as the pump ended it). */
void egress_relay_exec_ended(struct egress_conn *c);
/* Frees the relay's pipes and events. */
void egress_relay_free(struct egress_conn *c);

/* ---- egress_limits.c ---- */

int egress_limits_init(struct sbx_egress *eg, const struct sbx_config_egress *cfg,
		       struct sbx_err *err);
void egress_limits_free(struct sbx_egress *eg);
/* run->ident: its identity's entry, found or made; -1: out of memory. */
int egress_identity_attach(struct sbx_egress_run *run);
/* The run closed: its identity's entry is freed with its last run. */
void egress_identity_detach(struct sbx_egress_run *run);
/* 0: run may accept one more connection now; else the microseconds until
 * its identity's accept or audit-line budget has room again. */
int64_t egress_identity_accept_wait(struct sbx_egress_run *run, int64_t now_us);
/* An accepted connection takes one from its identity's accept budget. */
void egress_identity_accepted(struct sbx_egress_run *run, int64_t now_us);
/* n bytes of audit lines written for run. */
void egress_identity_lines(struct sbx_egress_run *run, uint64_t n);
/* A new connection of c->run holds a place (heads included): under
 * connections_per_run, connections_max and its identity's share of that;
 * true: counted (c->counted), false: refuse it. */
bool egress_limits_count(struct egress_conn *c);
void egress_limits_uncount(struct egress_conn *c);
void egress_rules_init(struct sbx_egress_run *run, int64_t now_us);
/* The first rule covering host:port, or -1. */
int egress_rule_find(const struct sbx_egress_run *run, const char *host, enum sbx_host_kind kind,
		     uint16_t port);
int egress_dest_find(const struct sbx_egress *eg, const char *host, enum sbx_host_kind kind,
		     uint16_t port);
/* c->rule and c->dest set: 0 and the connection counted (tokens taken,
 * open counts up), or -1 with *reason and *retry_after_s. */
int egress_limits_admit(struct egress_conn *c, const char **reason, unsigned *retry_after_s);
void egress_limits_release(struct egress_conn *c);
/* Bytes c may move now (at most want); 0 with *wait_us > 0: a bucket is
 * empty for that long. */
uint64_t egress_limits_bytes(struct egress_conn *c, uint64_t want, int64_t now_us,
			     int64_t *wait_us);
void egress_limits_take(struct egress_conn *c, uint64_t n, int64_t now_us);

/* ---- egress_record.c ---- */

/* c's decision: its audit line, its record (kept with the open ones when
 * allowed, with the closed ones when not), the destination's totals. */
void egress_record_decision(struct egress_conn *c, bool allowed, const char *reason,
			    unsigned status);
/* c's relay moved bytes: its record says so. */
void egress_record_bytes(struct egress_conn *c);
/* c's close line; an allowed record moves to the closed ones. */
void egress_record_close(struct egress_conn *c, const char *reason);
/* run->bytes grew past alert_bytes or reached max_bytes: once each. */
void egress_record_alert(struct sbx_egress_run *run);
void egress_record_max(struct sbx_egress_run *run);
void egress_record_free(struct sbx_egress_run *run);

#endif
