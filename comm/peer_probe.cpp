// The probe protocol: the asker connects to one of the peer's addresses and sends a Query (the job
// token and its own rank); the peer answers "RANK|w|SECONDS|WHAT" (waiting in WHAT for SECONDS)
// or "RANK|o|SECONDS|WHAT" (outside any wait, WHAT being its last one, which ended SECONDS ago;
// empty before the first) and closes. The rank in the answer tells a wrong address (another
// process that listens on the same port) from the peer.
#include "comm/peer_probe.h"

#include <arpa/inet.h>
#include <fmt/format.h>
#include <ifaddrs.h>
#include <mpi.h>
#include <net/if.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <mutex>
#include <random>
#include <thread>

#include "comm/mpi_check.h"
#include "comm/mpi_env.h"
#include "engine/core/log.h"

namespace shardrec::comm {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

// The wait in progress and the last one, under the mutex. Never destroyed, so the service and
// reporter threads may read it while the process exits.
struct WaitBoard {
    std::mutex mutex;
    const char* collective = nullptr;  // null: no wait in progress
    const std::string* group = nullptr;
    const std::vector<int>* world_ranks = nullptr;
    int64_t sequence = 0;
    double timeout_s = 0;
    Clock::time_point since;
    bool claimed = false;
    bool overdue_claimed = false;
    const char* last_collective = nullptr;  // null: no wait yet
    std::string last_group;
    int64_t last_sequence = 0;
    Clock::time_point last_end;
};

WaitBoard& wait_board() {
    static WaitBoard* board = new WaitBoard;
    return *board;
}

// What the service answers: where this rank stands now.
std::string where_this_rank_is(int rank) {
    WaitBoard& b = wait_board();
    std::lock_guard<std::mutex> lock(b.mutex);
    if (b.collective != nullptr) {
        return fmt::format("{}|w|{:.1f}|{}", rank, seconds_since(b.since),
                           wait_name(b.collective, b.sequence, *b.group));
    }
    if (b.last_collective == nullptr) {
        return fmt::format("{}|o|0|", rank);
    }
    return fmt::format("{}|o|{:.1f}|{}", rank, seconds_since(b.last_end),
                       wait_name(b.last_collective, b.last_sequence, b.last_group));
}

struct Query {
    uint64_t token = 0;
    int32_t rank = 0;
    int32_t pad = 0;
};

// How to reach a rank's service: its port (0: none) and its host's IPv4 addresses.
constexpr int kMaxAddresses = 8;

struct Endpoint {
    uint32_t port = 0;
    uint32_t count = 0;
    uint32_t addresses[kMaxAddresses] = {};  // network byte order
};

uint64_t g_token = 0;
// By world rank, set once by start_peer_probe_service; never destroyed (the threads that read it
// may outlive static destruction).
std::vector<Endpoint>& g_endpoints = *new std::vector<Endpoint>;

// Reads exactly n bytes within timeout_ms; false on a timeout, an error or an early close.
bool read_exactly(int fd, void* data, size_t n, int timeout_ms) {
    auto* p = static_cast<char*>(data);
    const auto deadline = Clock::now() + std::chrono::milliseconds(timeout_ms);
    while (n > 0) {
        const auto left =
            std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
        pollfd pfd{fd, POLLIN, 0};
        if (left.count() <= 0 || poll(&pfd, 1, static_cast<int>(left.count())) <= 0) {
            return false;
        }
        const ssize_t got = recv(fd, p, n, 0);
        if (got <= 0) {
            if (got < 0 && errno == EINTR) {
                continue;
            }
            return false;
        }
        p += got;
        n -= static_cast<size_t>(got);
    }
    return true;
}

void serve(int listener, int rank) {
    for (;;) {
        const int fd = accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EINTR && errno != ECONNABORTED) {
                std::this_thread::sleep_for(std::chrono::milliseconds(10));  // EMFILE and the like
            }
            continue;
        }
        Query q;
        if (read_exactly(fd, &q, sizeof(q), 200) && q.token == g_token) {
            const std::string answer = where_this_rank_is(rank);
            (void)send(fd, answer.data(), answer.size(), MSG_NOSIGNAL);
        }
        close(fd);
    }
}

// A listening socket on an ephemeral port of every address, or -1.
int listen_any(uint32_t* port) {
    const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return -1;
    }
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(fd, SOMAXCONN) != 0 ||
        getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
        close(fd);
        return -1;
    }
    *port = ntohs(addr.sin_port);
    return fd;
}

// The IPv4 addresses of this host's interfaces that are up, loopback excepted.
void host_addresses(Endpoint* e) {
    ifaddrs* list = nullptr;
    if (getifaddrs(&list) != 0) {
        return;
    }
    for (const ifaddrs* i = list; i != nullptr && e->count < kMaxAddresses; i = i->ifa_next) {
        if (i->ifa_addr != nullptr && i->ifa_addr->sa_family == AF_INET &&
            (i->ifa_flags & IFF_UP) != 0 && (i->ifa_flags & IFF_LOOPBACK) == 0) {
            e->addresses[e->count++] =
                reinterpret_cast<const sockaddr_in*>(i->ifa_addr)->sin_addr.s_addr;
        }
    }
    freeifaddrs(list);
}

std::string host_of(int world_rank) {
    const auto& hosts = process_info().hosts;
    return world_rank >= 0 && static_cast<size_t>(world_rank) < hosts.size()
               ? hosts[static_cast<size_t>(world_rank)]
               : std::string("?");
}

// One connection to one of a peer's addresses.
struct Attempt {
    int fd = -1;
    size_t peer = 0;
    bool sent = false;
    std::string answer;
};

// What became of a peer's probe.
struct PeerProbe {
    int rank = 0;
    bool answered = false;
    bool unreachable = false;  // an address did not answer in time, or has no route
    std::string state;         // answered: "w|SECONDS|WHAT" or "o|SECONDS|WHAT"
    int open = 0;              // attempts in flight
    int tried = 0;             // attempts made
};

// An address refuses (no process listens there) or cannot be reached.
bool refused(int err) {
    return err == ECONNREFUSED || err == ECONNRESET;
}

void finish(Attempt& a, std::vector<PeerProbe>& peers, bool unreachable) {
    if (a.fd >= 0) {
        close(a.fd);
        a.fd = -1;
        --peers[a.peer].open;
        peers[a.peer].unreachable = peers[a.peer].unreachable || unreachable;
    }
}

std::string describe(const PeerProbe& p, const std::string& what, double grace_s) {
    const std::string host = host_of(p.rank);
    if (!p.answered) {
        if (p.tried == 0) {
            return fmt::format(
                "rank {} on host {} has not reached it (it cannot be asked: its "
                "probe service did not start, or its host has no IPv4 address)",
                p.rank, host);
        }
        if (p.unreachable) {
            return fmt::format(
                "rank {} on host {} has not reached it (no answer within {:.2g} s: "
                "host {} is unreachable, or the process is stopped)",
                p.rank, host, grace_s, host);
        }
        return fmt::format(
            "rank {} on host {} has not reached it (its process is gone: host {} "
            "refused the connection)",
            p.rank, host, host);
    }
    const size_t bar = p.state.find('|', 2);
    const std::string seconds = p.state.substr(2, bar - 2);
    const std::string where = bar == std::string::npos ? std::string() : p.state.substr(bar + 1);
    if (p.state[0] == 'w') {
        return where == what ? std::string()
                             : fmt::format("rank {} on host {} waits in {} instead (for {} s)",
                                           p.rank, host, where, seconds);
    }
    if (where.empty()) {
        return fmt::format(
            "rank {} on host {} has not reached it (it computes outside "
            "communication and has not waited in a collective yet)",
            p.rank, host);
    }
    return fmt::format(
        "rank {} on host {} has not reached it (it computes outside communication: "
        "its last collective, {}, ended {} s ago)",
        p.rank, host, where, seconds);
}

}  // namespace

std::string wait_name(const char* collective, int64_t sequence, const std::string& group) {
    return fmt::format("{} #{} of group '{}'", collective, sequence, group);
}

WaitingIn::WaitingIn(const char* collective,
                     const std::string& group,
                     int64_t sequence,
                     const std::vector<int>& world_ranks,
                     double timeout_s) {
    WaitBoard& b = wait_board();
    std::lock_guard<std::mutex> lock(b.mutex);
    b.collective = collective;
    b.group = &group;
    b.world_ranks = &world_ranks;
    b.sequence = sequence;
    b.timeout_s = timeout_s;
    b.since = Clock::now();
    b.claimed = false;
    b.overdue_claimed = false;
}

WaitingIn::~WaitingIn() {
    WaitBoard& b = wait_board();
    std::lock_guard<std::mutex> lock(b.mutex);
    b.last_collective = b.collective;
    b.last_group = *b.group;  // a short name: no allocation once the string has grown
    b.last_sequence = b.sequence;
    b.last_end = Clock::now();
    b.collective = nullptr;
    b.group = nullptr;
    b.world_ranks = nullptr;
}

std::optional<LongWait> claim_long_wait(double min_s) {
    WaitBoard& b = wait_board();
    std::lock_guard<std::mutex> lock(b.mutex);
    if (b.collective == nullptr || b.claimed || seconds_since(b.since) < min_s) {
        return std::nullopt;
    }
    b.claimed = true;
    return LongWait{wait_name(b.collective, b.sequence, *b.group), seconds_since(b.since),
                    b.timeout_s, *b.world_ranks};
}

std::optional<LongWait> claim_overdue_wait(double margin_s) {
    WaitBoard& b = wait_board();
    std::lock_guard<std::mutex> lock(b.mutex);
    if (b.collective == nullptr || b.overdue_claimed || b.timeout_s <= 0 ||
        seconds_since(b.since) < b.timeout_s + margin_s) {
        return std::nullopt;
    }
    b.overdue_claimed = true;
    return LongWait{wait_name(b.collective, b.sequence, *b.group), seconds_since(b.since),
                    b.timeout_s, *b.world_ranks};
}

void start_peer_probe_service() {
    const ProcessInfo& me = process_info();
    if (me.world_size < 2 || !g_endpoints.empty()) {
        return;
    }
    // A timed-out wait asks every peer of its group at once, a socket each (an address each).
    rlimit files{};
    if (getrlimit(RLIMIT_NOFILE, &files) == 0 && files.rlim_cur < files.rlim_max) {
        files.rlim_cur = files.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &files);
    }
    Endpoint mine;
    const int listener = listen_any(&mine.port);
    if (listener < 0) {
        log::all().warn(
            "rank {} on host {}: no TCP port for the peer probes ({}); a timed-out "
            "collective will not say where this rank was",
            me.rank, me.host, std::strerror(errno));
    } else {
        host_addresses(&mine);
    }
    if (me.rank == 0) {
        std::random_device rd;
        g_token = (uint64_t{rd()} << 32) ^ rd();
    }
    SR_MPI_CHECK(MPI_Bcast(&g_token, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD));
    g_endpoints.resize(static_cast<size_t>(me.world_size));
    constexpr int kBytes = static_cast<int>(sizeof(Endpoint));
    SR_MPI_CHECK(MPI_Allgather(&mine, kBytes, MPI_BYTE, g_endpoints.data(), kBytes, MPI_BYTE,
                               MPI_COMM_WORLD));
    if (listener >= 0) {
        std::thread(serve, listener, me.rank).detach();
    }
}

std::optional<std::string> describe_missing_peers(const std::string& what,
                                                  const std::vector<int>& world_ranks,
                                                  double grace_s,
                                                  const std::function<bool()>& completed) {
    const ProcessInfo& me = process_info();
    if (g_endpoints.empty()) {
        return std::string();
    }
    std::vector<PeerProbe> peers;
    std::vector<Attempt> attempts;

    // Closes what is still open when `completed` throws (a failed collective).
    struct CloseAll {
        std::vector<Attempt>& attempts;

        ~CloseAll() {
            for (const Attempt& a : attempts) {
                if (a.fd >= 0) {
                    close(a.fd);
                }
            }
        }
    } close_all{attempts};

    const Query query{g_token, me.rank, 0};
    for (const int r : world_ranks) {
        if (r == me.rank) {
            continue;
        }
        const size_t peer = peers.size();
        peers.emplace_back();
        peers.back().rank = r;
        const Endpoint& e = g_endpoints[static_cast<size_t>(r)];
        if (e.port == 0) {
            continue;
        }
        // A peer on this host is tried on the loopback too (its interfaces may be none).
        std::vector<uint32_t> to(e.addresses, e.addresses + e.count);
        if (host_of(r) == me.host) {
            to.push_back(htonl(INADDR_LOOPBACK));
        }
        for (const uint32_t address : to) {
            const int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fd < 0) {
                continue;
            }
            sockaddr_in addr{};
            addr.sin_family = AF_INET;
            addr.sin_addr.s_addr = address;
            addr.sin_port = htons(static_cast<uint16_t>(e.port));
            attempts.emplace_back();
            attempts.back().fd = fd;
            attempts.back().peer = peer;
            ++peers[peer].open;
            ++peers[peer].tried;
            if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 &&
                errno != EINPROGRESS) {
                finish(attempts.back(), peers, !refused(errno));
            }
        }
    }
    const auto deadline = Clock::now() + std::chrono::duration<double>(grace_s);
    std::vector<pollfd> polled;
    std::vector<size_t> polled_attempt;
    for (;;) {
        if (completed && completed()) {
            for (Attempt& a : attempts) {
                finish(a, peers, false);
            }
            return std::nullopt;
        }
        polled.clear();
        polled_attempt.clear();
        for (size_t i = 0; i < attempts.size(); ++i) {
            Attempt& a = attempts[i];
            if (a.fd >= 0 && peers[a.peer].answered) {
                finish(a, peers, false);  // another address of the peer answered
            }
            if (a.fd >= 0) {
                polled.push_back(pollfd{a.fd, static_cast<short>(a.sent ? POLLIN : POLLOUT), 0});
                polled_attempt.push_back(i);
            }
        }
        const double left = std::chrono::duration<double>(deadline - Clock::now()).count();
        if (polled.empty() || left <= 0) {
            break;
        }
        // Short polls while `completed` is to be watched.
        const int wait_ms = std::clamp(static_cast<int>(left * 1e3), 1, completed ? 1 : 50);
        if (poll(polled.data(), polled.size(), wait_ms) <= 0) {
            continue;
        }
        for (size_t k = 0; k < polled.size(); ++k) {
            if (polled[k].revents == 0) {
                continue;
            }
            Attempt& a = attempts[polled_attempt[k]];
            if (!a.sent) {
                int err = 0;
                socklen_t len = sizeof(err);
                getsockopt(a.fd, SOL_SOCKET, SO_ERROR, &err, &len);
                if (err != 0) {
                    finish(a, peers, !refused(err));
                } else if (send(a.fd, &query, sizeof(query), MSG_NOSIGNAL) !=
                           static_cast<ssize_t>(sizeof(query))) {
                    finish(a, peers, false);
                } else {
                    a.sent = true;
                }
                continue;
            }
            char buf[256];
            const ssize_t got = recv(a.fd, buf, sizeof(buf), 0);
            if (got > 0) {
                a.answer.append(buf, static_cast<size_t>(got));
                continue;
            }
            if (got < 0 && (errno == EAGAIN || errno == EINTR)) {
                continue;
            }
            // Closed: the answer is whole. One from another rank (or none) counts as a refusal.
            PeerProbe& p = peers[a.peer];
            const std::string rank = std::to_string(p.rank) + "|";
            if (a.answer.size() > rank.size() + 2 && a.answer.compare(0, rank.size(), rank) == 0) {
                p.answered = true;
                p.state = a.answer.substr(rank.size());
            }
            finish(a, peers, false);
        }
    }
    for (Attempt& a : attempts) {
        finish(a, peers, true);  // still connecting or answering at the deadline
    }
    // The first kMaxNamed peers that are not in this wait, and how many more.
    constexpr int kMaxNamed = 16;
    std::string out;
    int named = 0;
    for (const PeerProbe& p : peers) {
        const std::string line = describe(p, what, grace_s);
        if (!line.empty() && ++named <= kMaxNamed) {
            out += (out.empty() ? "" : "; ") + line;
        }
    }
    if (named > kMaxNamed) {
        out += fmt::format("; and {} more ranks", named - kMaxNamed);
    }
    return out.empty() ? fmt::format("every rank of the group is waiting in {} too", what) : out;
}

PeerDeadline::PeerDeadline(double timeout_s, const std::vector<int>& world_ranks)
    : timeout_s_(timeout_s),
      grace_s_(std::clamp(0.1 * timeout_s, 0.05, 2.0)),
      world_ranks_(world_ranks) {}

bool PeerDeadline::ask_when_due(double waited_s,
                                const char* collective,
                                int64_t sequence,
                                const std::string& group,
                                const std::function<bool()>& completed) {
    if (timeout_s_ <= 0 || missing_ || waited_s <= timeout_s_ - grace_s_) {
        return true;
    }
    missing_ = describe_missing_peers(wait_name(collective, sequence, group), world_ranks_,
                                      std::max(timeout_s_ - waited_s, 0.05), completed);
    return missing_.has_value();
}

std::optional<std::string> PeerDeadline::expired(double waited_s) const {
    return timeout_s_ > 0 && waited_s >= timeout_s_ ? missing_ : std::nullopt;
}

}  // namespace shardrec::comm
