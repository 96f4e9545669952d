/* SPDX-License-Identifier: Apache-2.0 */
/* A helper's last words (runs_last_words.h). */
#include "runs_last_words.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <unistd.h>

#include "clock.h"
#include "runs_proc.h"

void last_words_init(struct last_words *lw, int fd)
{
	*lw = (struct last_words){.fd = fd, .kept = malloc(LAST_WORDS_BYTES)};
	/* Never a wait: unread, as before, when it cannot be made so. */
	if (lw->fd >= 0 && fcntl(lw->fd, F_SETFL, O_NONBLOCK) < 0)
		lw->fd = -1;
}

void last_words_read(struct last_words *lw)
{
	char spill[4096];

	while (lw->fd >= 0) {
		bool keep = lw->kept && lw->len < LAST_WORDS_BYTES;
		char *to = keep ? lw->kept + lw->len : spill;
		size_t room = keep ? LAST_WORDS_BYTES - lw->len : sizeof(spill);
		ssize_t n = read(lw->fd, to, room);

		if (n < 0 && errno == EINTR)
			continue;
		if (n == 0 || (n < 0 && errno != EAGAIN))
			lw->fd = -1; /* every writer gone: nothing more will come */
		if (n <= 0)
			return;
		if (keep)
			lw->len += (size_t)n;
		else
			lw->lost += (uint64_t)n;
	}
}

bool last_words_reap(struct last_words *lw, pid_t pid, int pidfd, int timeout_ms, int *status)
{
	int64_t deadline = sbx_mono_ms() + timeout_ms;

	for (;;) {
		last_words_read(lw);
		if (proc_reap(pid, pidfd, 0, status))
			return true;
		int64_t left = deadline - sbx_mono_ms();
		if (left <= 0)
			return false;
		/* Without a pidfd, the exit is looked for every 10 ms. */
		struct pollfd p[2] = {{.fd = lw->fd, .events = POLLIN},
				      {.fd = pidfd, .events = POLLIN}};
		if (pidfd < 0 && left > 10)
			left = 10;
		if (poll(p, 2, (int)left) < 0 && errno != EINTR)
			usleep(10000); /* ENOMEM: back off, never spin */
	}
}

void last_words_free(struct last_words *lw)
{
	free(lw->kept);
	lw->kept = NULL;
}
