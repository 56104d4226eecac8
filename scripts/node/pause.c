/* The pod sandbox's process on the real node (scripts/node/build.sh builds it static and makes
 * it the image containerd's CRI names as sandbox_image). It holds the pod's namespaces open and
 * does nothing else: it waits for signals, exits 0 on SIGINT/SIGTERM (so a pod stops at once,
 * not after the runtime's kill timeout), and reaps children, because with
 * shareProcessNamespace it is PID 1 of every container in the pod. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

static void stop(int sig) { (void)sig; _exit(0); }

static void reap(int sig) {
  (void)sig;
  while (waitpid(-1, NULL, WNOHANG) > 0) {
  }
}

int main(int argc, char **argv) {
  if (argc > 1 && argv[1][0] == '-' && argv[1][1] == 'v') {
    puts("llm-serving pause 1");
    return 0;
  }
  struct sigaction on_stop = {.sa_handler = stop};
  struct sigaction on_child = {.sa_handler = reap, .sa_flags = SA_NOCLDSTOP | SA_RESTART};
  if (sigaction(SIGINT, &on_stop, NULL) || sigaction(SIGTERM, &on_stop, NULL) ||
      sigaction(SIGCHLD, &on_child, NULL)) {
    perror("pause: sigaction");
    return 1;
  }
  for (;;) pause();
}
