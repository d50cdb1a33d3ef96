// `shardrec serve` as a user runs it: a small quickstart (one weighted table, one mean-pooled)
// trained, quantized, served from the built binary on a free loopback port and scored with curl.
// The same request body, read by `predict --data FILE.json`, gives the same f32 scores bit for
// bit, whether a request is scored alone or batched with others; requests sent together are
// batched and each gets its own slice; every kind of bad input is a 400 naming its field and
// example, and leaves the server and the other requests of its batch alone; SIGTERM ends it with
// exit 0.
#include <catch2/catch.hpp>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "test/e2e/e2e_support.h"
#include "test/support/compare.h"

using namespace shardrec::test;
using Catch::Matchers::Contains;
namespace fs = std::filesystem;

namespace {

// stdout of a shell command.
std::string sh(const std::string& cmd) {
    std::string out;
    FILE* p = ::popen(cmd.c_str(), "r");
    REQUIRE(p != nullptr);
    char buf[4096];
    size_t n = 0;
    while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0)
        out.append(buf, n);
    ::pclose(p);
    return out;
}

struct Reply {
    int code = 0;
    std::string body;
};

// POST of the file `body` (or GET when empty) with curl, bounded in time; as JSON, or with
// curl's default form type when `json` is false.
Reply http(const fs::path& dir,
           int port,
           const std::string& path,
           const fs::path& body = {},
           bool json = true) {
    static int n = 0;
    const fs::path out = dir / ("reply" + std::to_string(n++));
    std::string cmd = "curl -s --max-time 30 -o " + out.string() + " -w '%{http_code}' ";
    if (!body.empty())
        cmd += std::string(json ? "-H 'Content-Type: application/json' " : "") + "--data-binary @" +
               body.string() + " ";
    const std::string code = sh(cmd + "http://127.0.0.1:" + std::to_string(port) + path);
    return Reply{std::atoi(code.c_str()), read_file(out)};
}

// The numbers of {"scores":[...]} as f32, parsed as the writer's %.9g round-trips.
std::vector<float> scores(const std::string& body) {
    const size_t open = body.find('['), close = body.find(']');
    REQUIRE(body.rfind("{\"scores\":[", 0) == 0);
    std::vector<float> out;
    std::istringstream in(body.substr(open + 1, close - open - 1));
    std::string tok;
    while (std::getline(in, tok, ','))
        out.push_back(std::strtof(tok.c_str(), nullptr));
    return out;
}

// `count` examples from a seeded generator: every feature of the quickstart, some bags empty,
// ids anywhere in their tables, weights for the weighted table's feature (f_t3).
std::string examples_json(uint32_t seed, int count) {
    std::mt19937 rng(seed);
    const std::vector<std::pair<std::string, int>> features = {
        {"f_t0", 20000}, {"f_t1", 10000}, {"f_t2", 5000}, {"f_t3", 2000},
        {"f_t4", 1000},  {"f_t5", 4000},  {"f_t6", 8000}, {"f_t7", 15000}};
    std::string t = "{\"examples\":[";
    char buf[64];
    for (int e = 0; e < count; ++e) {
        t += e == 0 ? "{\"dense\":[" : ",\n{\"dense\":[";
        for (int j = 0; j < 13; ++j) {
            std::snprintf(buf, sizeof(buf), "%s%.9g", j == 0 ? "" : ",",
                          std::uniform_real_distribution<float>(0.0F, 5.0F)(rng));
            t += buf;
        }
        t += "],\"sparse\":{";
        std::string weights;
        for (size_t f = 0; f < features.size(); ++f) {
            const int len = static_cast<int>(rng() % 4);
            t += (f == 0 ? "\"" : ",\"") + features[f].first + "\":[";
            for (int k = 0; k < len; ++k)
                t += (k == 0 ? "" : ",") + std::to_string(rng() % features[f].second);
            t += "]";
            if (features[f].first == "f_t3") {
                for (int k = 0; k < len; ++k) {
                    std::snprintf(buf, sizeof(buf), "%s%.9g", k == 0 ? "" : ",",
                                  std::uniform_real_distribution<float>(0.0F, 2.0F)(rng));
                    weights += buf;
                }
            }
        }
        t += "},\"weights\":{\"f_t3\":[" + weights + "]}}";
    }
    return t + "]}\n";
}

// The server, started in the background by a shell that records its exit status.
struct Server {
    fs::path dir;
    int port = 0;
    int pid = 0;
    bool stopped = false;

    Server(const fs::path& d, const std::vector<std::string>& args) : dir(d) {
        const char* bin = std::getenv("SHARDREC_BIN");
        REQUIRE(bin != nullptr);
        std::string cmd = std::string("( timeout -k 5 300 ") + bin + " serve";
        for (const std::string& a : args)
            cmd += " " + a;
        cmd += " > " + (dir / "serve.log").string() + " 2>&1 & pid=$!; echo $pid > " +
               (dir / "serve.pid").string() + "; wait $pid; echo $? > " +
               (dir / "serve.rc").string() + " ) > /dev/null 2>&1 &";
        REQUIRE(std::system(cmd.c_str()) == 0);
        for (int i = 0; i < 600 && port == 0; ++i) {  // 60 s at most
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
            const std::string log = read_file(dir / "serve.log");
            const size_t at = log.find("\"port\":");
            if (at != std::string::npos)
                port = std::atoi(log.c_str() + at + 7);
            REQUIRE(!fs::exists(dir / "serve.rc"));  // it did not die while starting
        }
        INFO(read_file(dir / "serve.log"));
        REQUIRE(port > 0);
        pid = std::atoi(read_file(dir / "serve.pid").c_str());
        REQUIRE(pid > 0);
    }

    Server(const Server&) = delete;
    Server& operator=(const Server&) = delete;

    // A failed REQUIRE leaves it running: end it.
    ~Server() {
        if (!stopped)
            kill_all();
    }

    // SIGKILL to serve and to the timeout around it (which forwards SIGTERM, not SIGKILL).
    void kill_all() const {
        sh("pkill -KILL -P " + std::to_string(pid) + "; kill -KILL " + std::to_string(pid) +
           " 2>/dev/null");
    }

    // SIGTERM, then the exit status (-1: still running after 30 s).
    int stop() {
        stopped = true;
        sh("kill -TERM " + std::to_string(pid));
        for (int i = 0; i < 300; ++i) {
            const std::string rc = read_file(dir / "serve.rc");
            if (!rc.empty())
                return std::atoi(rc.c_str());
            std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        kill_all();
        return -1;
    }
};

}  // namespace

TEST_CASE("serve: predict's scores over HTTP, batching, bad input, metrics", "[e2e][serve]") {
    if (sh("command -v curl").empty()) {
        not_run("curl is not installed");
        return;
    }
    const RunResult help = run_shardrec({"serve", "--help"});
    if (help.exit_code != 0 && help.output.find("without cpp-httplib") != std::string::npos) {
        not_run("shardrec was built without cpp-httplib");
        return;
    }
    REQUIRE(help.exit_code == 0);
    const fs::path dir = fresh_dir("serve");
    std::string yaml = read_file(repo_root() / "configs" / "quickstart.yaml");
    for (const auto& [from, to] :
         {std::pair<std::string, std::string>{"{name: t3, num_embeddings: 2000}",
                                              "{name: t3, num_embeddings: 2000, weighted: true}"},
          {"{name: t4, num_embeddings: 1000, pooling_factor: 3}",
           "{name: t4, num_embeddings: 1000, pooling_factor: 3, pooling: mean}"}}) {
        REQUIRE(yaml.find(from) != std::string::npos);
        yaml.replace(yaml.find(from), from.size(), to);
    }
    std::ofstream(dir / "config.yaml") << yaml;
    const RunResult t = run_shardrec(
        {"train", (dir / "config.yaml").string(), "--out", (dir / "run").string(), "--set",
         "train.steps=20", "--set", "train.eval_every=0", "--set", "train.checkpoint_every=20",
         "--set", "train.eval_samples=256", "--set", "data.batch_size=64"},
        "timeout -k 10 300");
    INFO(t.output);
    REQUIRE(t.exit_code == 0);
    const std::string model = (dir / "model").string();
    const RunResult q = run_shardrec({"ckpt", "quantize", (dir / "run" / "checkpoints").string(),
                                      "--out", model, "--weights", "int8", "--tables", "t0=int4"},
                                     "timeout 120");
    INFO(q.output);
    REQUIRE(q.exit_code == 0);

    // 48 examples: one request of them, and predict on the same file (one chunk of 48 at
    // data.batch_size 64): the same batch through the same layers.
    const fs::path examples = dir / "examples.json";
    std::ofstream(examples) << examples_json(7, 48);
    const fs::path predicted = dir / "predicted.bin";
    const RunResult p =
        run_shardrec({"predict", model, "--data", examples.string(), "--out", predicted.string()},
                     "timeout -k 10 120");
    INFO(p.output);
    REQUIRE(p.exit_code == 0);
    const std::string want = read_file(predicted);
    REQUIRE(want.size() == 48 * sizeof(float));

    Server server(dir, {model, "--port", "0", "--threads", "8", "--max-batch", "64",
                        "--max-wait-ms", "300", "--max-body-mb", "1"});
    INFO(read_file(dir / "serve.log"));
    int ok_requests = 0, ok_examples = 0;

    {
        // A second server on the same port does not start (no SO_REUSEPORT sharing).
        const RunResult twice = run_shardrec(
            {"serve", model, "--port", std::to_string(server.port)}, "timeout -k 5 60");
        CHECK(twice.exit_code == 1);
        CHECK_THAT(twice.output, Contains("serve: cannot listen on 127.0.0.1:" +
                                          std::to_string(server.port) + " (in use"));

        {  // the same bits as predict; sent as `curl -d` sends it (a form type) and over 8 KiB
            REQUIRE(fs::file_size(examples) > 8192);
            const Reply r = http(dir, server.port, "/v1/score", examples, false);
            INFO(r.body);
            REQUIRE(r.code == 200);
            const std::vector<float> got = scores(r.body);
            REQUIRE(got.size() == 48);
            CHECK(std::memcmp(got.data(), want.data(), want.size()) == 0);
            ++ok_requests;
            ok_examples += 48;
        }
        CHECK(http(dir, server.port, "/healthz").body == "ok\n");
        // An endpoint asked with the other method: 405, naming the method it takes.
        CHECK(sh("curl -s -o /dev/null -w '%{http_code}' -X POST http://127.0.0.1:" +
                 std::to_string(server.port) + "/healthz") == "405");

        // Bad input: one file each, kind and field named.
        const std::string D = "\"dense\":[1,2,3,4,5,6,7,8,9,10,11,12,13]";
        const std::vector<std::tuple<std::string, std::string, std::string>> bad = {
            {"{\"examples\":[{" + D + "},{" + D + ",\"sparse\":{\"f_zz\":[1]}}]}",
             "unknown_feature", "\"field\":\"examples[1].sparse.f_zz\",\"example\":1"},
            {"{\"examples\":[{\"dense\":[1,2]}]}", "dense_width",
             "\"field\":\"examples[0].dense\",\"example\":0"},
            {"{\"examples\":[{" + D + ",\"sparse\":{\"f_t1\":[3,10000]}}]}", "id_out_of_range",
             "\"field\":\"examples[0].sparse.f_t1[1]\",\"example\":0"},
            {"{\"examples\":[{" + D + ",\"sparse\":{\"f_t3\":[3]},\"weights\":{\"f_t3\":[]}}]}",
             "weights_mismatch", "\"field\":\"examples[0].weights.f_t3\""},
            {"{\"examples\":[{" + D + "}", "malformed_json", "at the end of the body"},
            {"{\"examples\":[" + std::string(2 << 20, ' ') + "]}", "body_too_large",
             "--max-body-mb 1 MiB"},
        };
        std::string too_many = "{\"examples\":[";
        for (int i = 0; i < 65; ++i)
            too_many += (i == 0 ? "{" : ",{") + D + "}";
        std::vector<std::tuple<std::string, std::string, std::string>> all = bad;
        all.emplace_back(too_many + "]}", "too_many_examples", "more than 64 examples");
        for (size_t i = 0; i < all.size(); ++i) {
            const auto& [body, kind, says] = all[i];
            const fs::path file = dir / ("bad" + std::to_string(i) + ".json");
            std::ofstream(file) << body;
            const Reply r = http(dir, server.port, "/v1/score", file);
            INFO(kind << ": " << r.body);
            CHECK(r.code == 400);
            CHECK_THAT(r.body, Contains("{\"error\":{\"kind\":\"" + kind + "\""));
            CHECK_THAT(r.body, Contains(says));
        }

        {  // 3 good requests of 16 examples and a bad one at once: the good ones are batched
           // (within the 300 ms wait) and get their own slices; the bad one alone gets its 400.
            std::vector<fs::path> parts;
            for (int k = 0; k < 3; ++k) {
                std::string body = examples_json(7, 48);
                // Examples [16k, 16k + 16) of the 48: cut at the example separators.
                std::vector<size_t> starts;
                for (size_t at = body.find("{\"dense\""); at != std::string::npos;
                     at = body.find("{\"dense\"", at + 1))
                    starts.push_back(at);
                const size_t b = starts[16 * k];
                const size_t e = k == 2 ? body.rfind(']') : starts[16 * k + 16] - 2;
                parts.push_back(dir / ("part" + std::to_string(k) + ".json"));
                std::ofstream(parts.back()) << "{\"examples\":[" << body.substr(b, e - b) << "]}";
            }
            const std::string url = "http://127.0.0.1:" + std::to_string(server.port);
            std::string cmd;
            for (int k = 0; k < 4; ++k) {
                const fs::path body = k < 3 ? parts[k] : dir / "bad2.json";
                cmd += "curl -s --max-time 30 -o " + (dir / ("out" + std::to_string(k))).string() +
                       " -w '%{http_code}\\n' --data-binary @" + body.string() + " " + url +
                       "/v1/score > " + (dir / ("code" + std::to_string(k))).string() + " & ";
            }
            sh(cmd + "wait");
            CHECK(read_file(dir / "code3") == "400\n");
            CHECK_THAT(read_file(dir / "out3"), Contains("id_out_of_range"));
            for (int k = 0; k < 3; ++k) {
                INFO("part " << k);
                REQUIRE(read_file(dir / ("code" + std::to_string(k))) == "200\n");
                const std::vector<float> got = scores(read_file(dir / ("out" + std::to_string(k))));
                REQUIRE(got.size() == 16);
                // Another batch (other rows beside them, at other places): the same bits, since
                // a scoring GEMM's row depends on that row alone (kernels/cpu/gemm_ordered.cpp).
                CHECK(std::memcmp(got.data(), want.data() + 16 * k * sizeof(float),
                                  16 * sizeof(float)) == 0);
                ++ok_requests;
                ok_examples += 16;
            }
        }

        const Reply m = http(dir, server.port, "/metrics");
        INFO(m.body);
        CHECK(m.code == 200);
        CHECK_THAT(m.body, Contains("# TYPE shardrec_serve_request_seconds histogram"));
        CHECK_THAT(m.body, Contains("shardrec_serve_requests_total{code=\"200\"} " +
                                    std::to_string(ok_requests) + "\n"));
        // Every bad file and the bad request sent with the good ones.
        CHECK_THAT(m.body, Contains("shardrec_serve_requests_total{code=\"400\"} " +
                                    std::to_string(all.size() + 1) + "\n"));
        CHECK_THAT(m.body,
                   Contains("shardrec_serve_examples_total " + std::to_string(ok_examples) + "\n"));
        CHECK_THAT(m.body, Contains("shardrec_serve_errors_total{kind=\"id_out_of_range\"} 2\n"));
        CHECK_THAT(m.body, Contains("shardrec_serve_errors_total{kind=\"body_too_large\"} 1\n"));
        CHECK_THAT(m.body, Contains("shardrec_serve_request_seconds_bucket{le=\"+Inf\"} "));
        // The 3 concurrent good requests shared a batch: fewer batches than good requests.
        const size_t at = m.body.find("shardrec_serve_batches_total ");
        REQUIRE(at != std::string::npos);
        CHECK(std::atoi(m.body.c_str() + at + 29) < ok_requests);
    }
    CHECK(server.stop() == 0);
    CHECK_THAT(read_file(dir / "serve.log"), Contains("stopped by signal 15"));
}
