/*
 * Copyright: (c) 2026, gpufleet.deepep contributors
 * GNU General Public License v3.0+ (see LICENSE or https://www.gnu.org/licenses/gpl-3.0.txt)
 *
 * vmfleet-python3: the Python interpreter Ansible names on the realvm guests (ansible_python_interpreter).
 *
 * Called the way Ansible runs a module (no arguments and the module's code on stdin when it pipelines, or the path of
 * the module's file as the one argument when it does not), it hands the script's path and its standard
 * streams, working directory, umask and environment to the fork server of tools/pyzygote.py over a Unix socket, so
 * that the module runs in a worker that did not import ansible-core's module_utils again, forwards the signals that
 * end a session to that worker, and exits with the worker's status (a worker killed by a signal kills this process
 * with the same signal). Called any other way, or when no server answers, it is /usr/bin/python3 (exec).
 * VMFLEET_PYZYGOTE_OFF set: always python3; VMFLEET_PYZYGOTE_SOCKET: another socket (the tests' server).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#define SOCKET_PATH "/run/vmfleet-pyzygote.sock"
#define PYTHON "/usr/bin/python3"

extern char **environ;
static volatile pid_t worker = 0;

static void python(char **argv)
{
    argv[0] = (char *)PYTHON;
    execv(PYTHON, argv);
    fprintf(stderr, "vmfleet-python3: exec %s: %s\n", PYTHON, strerror(errno));
    _exit(127);
}

static void forward(int sig)
{
    if (worker > 0)
        kill(worker, sig);
}

/* All of size bytes read (writing 0) or written (writing 1), retried after a signal; -1 on an error or EOF. */
static int exact(int fd, void *buf, size_t size, int writing)
{
    char *p = buf;
    while (size) {
        ssize_t n = writing ? write(fd, p, size) : read(fd, p, size);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        size -= (size_t)n;
    }
    return 0;
}

/* cwd NUL umask(octal) NUL script NUL NAME=VALUE NUL ... (script: empty for stdin) */
static char *request(const char *script, size_t *size)
{
    char cwd[PATH_MAX];
    char mask[16];
    mode_t old = umask(0);
    umask(old);
    if (!getcwd(cwd, sizeof cwd))
        cwd[0] = '\0';
    snprintf(mask, sizeof mask, "%o", (unsigned)old);
    size_t total = strlen(cwd) + 1 + strlen(mask) + 1 + strlen(script) + 1;
    for (char **e = environ; *e; e++)
        total += strlen(*e) + 1;
    char *buf = malloc(total), *p = buf;
    if (!buf)
        return NULL;
    p = stpcpy(p, cwd) + 1;
    p = stpcpy(p, mask) + 1;
    p = stpcpy(p, script) + 1;
    for (char **e = environ; *e; e++)
        p = stpcpy(p, *e) + 1;
    *size = total;
    return buf;
}

int main(int argc, char **argv)
{
    struct stat st;
    const char *script = "";
    if (argc == 2 && argv[1][0] != '-' && stat(argv[1], &st) == 0 && S_ISREG(st.st_mode))
        script = argv[1];
    else if (argc != 1)
        python(argv);
    if (getenv("VMFLEET_PYZYGOTE_OFF"))
        python(argv);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    const char *path = getenv("VMFLEET_PYZYGOTE_SOCKET");
    strncpy(addr.sun_path, path && *path ? path : SOCKET_PATH, sizeof addr.sun_path - 1);
    if (sock < 0 || connect(sock, (struct sockaddr *)&addr, sizeof addr) < 0)
        python(argv);

    size_t size = 0;
    char *body = request(script, &size);
    if (!body)
        python(argv);
    uint32_t header = htonl((uint32_t)size);
    int fds[3] = {0, 1, 2};
    char control[CMSG_SPACE(sizeof fds)];
    memset(control, 0, sizeof control);
    struct iovec iov = {.iov_base = &header, .iov_len = sizeof header};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = control, .msg_controllen = sizeof control};
    struct cmsghdr *cmsg = CMSG_FIRSTHDR(&msg);
    cmsg->cmsg_level = SOL_SOCKET;
    cmsg->cmsg_type = SCM_RIGHTS;
    cmsg->cmsg_len = CMSG_LEN(sizeof fds);
    memcpy(CMSG_DATA(cmsg), fds, sizeof fds);
    if (sendmsg(sock, &msg, 0) != (ssize_t)sizeof header || exact(sock, body, size, 1) < 0)
        python(argv); /* nothing has read stdin yet */
    free(body);

    int32_t pid = 0, status = 0;
    if (exact(sock, &pid, sizeof pid, 0) < 0)
        python(argv); /* the server ran no worker */
    worker = (pid_t)pid;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = forward;
    sigemptyset(&sa.sa_mask);
    int forwarded[] = {SIGHUP, SIGINT, SIGQUIT, SIGTERM, SIGUSR1, SIGUSR2, SIGALRM};
    for (size_t i = 0; i < sizeof forwarded / sizeof forwarded[0]; i++)
        sigaction(forwarded[i], &sa, NULL);
    if (exact(sock, &status, sizeof status, 0) < 0) {
        fprintf(stderr, "vmfleet-python3: the fork server lost worker %d\n", (int)worker);
        return 255;
    }
    if (WIFEXITED(status))
        return WEXITSTATUS(status);
    if (WIFSIGNALED(status)) {
        int sig = WTERMSIG(status);
        signal(sig, SIG_DFL);
        kill(getpid(), sig);
        return 128 + sig;
    }
    return 255;
}
