/* The cheapest handler agentbox can start: note the time, append it to argv[1], exit.
 * It leaves the batch on stdin unread and answers nothing (silence). */
#include <stdio.h>
#include <time.h>

int main(int argc, char **argv) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    if (argc < 2) return 2;
    FILE *out = fopen(argv[1], "a");
    if (!out) return 1;
    fprintf(out, "%lld.%09ld\n", (long long)now.tv_sec, now.tv_nsec);
    return fclose(out) != 0;
}
