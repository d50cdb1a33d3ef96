// `shardrec predict MODEL_DIR --data synthetic|PATH --out FILE`: batch scoring with a quantized
// model directory (shardrec ckpt quantize). The input is cut into chunks of data.batch_size
// samples and chunk c goes to rank c mod N, so each chunk goes through the dense layers the same
// way at any N. The tables are sharded over the ranks by the config's plan (TorchRec
// ShardedQuantEmbeddingBagCollection: input all-to-all, lookups on the shards' quantized rows,
// output all-to-all or reduce-scatter), each rank holding only its shards; every rank runs the
// same number of rounds (one without a chunk of its own in the last round scores chunk 0 again
// and drops it), since the lookups are collective. With --replicated, or one rank, every rank
// holds the whole model (QuantEmbeddingBagCollection) and nothing is exchanged until the end.
// Every plan gives the scores of one process bit for bit: row-sharded tables send their stored
// rows to the sample's rank (QuantizedRowFetch), which pools them as one process does. Rank 0
// gathers the scores in input order
// and writes FILE.tmp, renamed to FILE when whole.
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>

#include "comm/mpi_env.h"
#include "comm/process_group.h"
#include "engine/config/config.h"
#include "engine/core/durable_file.h"
#include "engine/core/error.h"
#include "engine/core/log.h"
#include "engine/data/criteo_preprocess.h"
#include "engine/data/criteo_shard.h"
#include "engine/data/make_dataset.h"
#include "engine/distributed/planner.h"
#include "engine/distributed/sharded_embedding_bag_collection.h"
#include "engine/distributed/topology.h"
#include "engine/modules/model.h"
#include "engine/modules/quant_embedding_bag_collection.h"
#include "engine/train/progress.h"
#include "engine/train/quantized_model.h"
#include "engine/train/run_dir.h"
#include "engine/train/trainer.h"
#include "kernels/device_ceilings.h"
#include "kernels/linear.h"
#include "tools/cli.h"
#include "tools/scoring.h"

namespace shardrec::cli {
namespace fs = std::filesystem;

namespace {

const char* const kPredictUsage =
    "usage: shardrec predict MODEL_DIR --data synthetic|PATH --out FILE.csv|FILE.bin\n"
    "                        [--config CONFIG.yaml] [--samples S] [--replicated]\n"
    "                        [--set KEY=VALUE ...]\n"
    "\n"
    "Scores samples with a quantized model directory (shardrec ckpt quantize), its tables looked\n"
    "up as stored (int8/int4/int2/fp8/fp16/f32 rows). Run several ranks with mpirun -np N: the\n"
    "samples are split over the ranks and the tables sharded by the config's plan (each rank\n"
    "holds its shards); the scores are the same at any N and plan, bit for bit.\n"
    "\n"
    "  --data synthetic    the eval split of the config's synthetic data\n"
    "  --data PATH         binary Criteo shards (shardrec data criteo-preprocess): every row\n"
    "  --data FILE[,FILE]  Criteo TSV files, every line, hashed as the model's training data\n"
    "                      (the layout of the manifest at data.criteo_binary.path)\n"
    "  --data FILE.json    the examples of a `shardrec serve` request body, in order\n"
    "  --out FILE          one score (the predicted click probability) per sample, in input\n"
    "                      order: FILE.csv as text ('score' header), FILE.bin as little-endian\n"
    "                      f32; written to FILE.tmp by rank 0, then renamed\n"
    "  --config CONFIG     the model's config (default: config.yaml of the run the model's\n"
    "                      checkpoint came from, if its run directory is still beside it)\n"
    "  --samples S         score the first S samples (default: synthetic train.eval_samples,\n"
    "                      PATH every row)\n"
    "  --replicated        every rank holds the whole model (no exchange in the lookups; the\n"
    "                      same scores bit for bit at any N)\n"
    "  --set KEY=VALUE     override one config key (data.batch_size: samples per chunk;\n"
    "                      sharding.*: the plan)\n"
    "\n"
    "Ends with one JSON line {\"kind\":\"predict\",\"samples\":S,\"samples_per_s\":R,\n"
    "\"lookup_gbps\":G,\"host_copy_gbps\":C,...}.\n";

struct PredictArgs {
    std::string model_dir, data, out, config;
    int64_t samples = -1;
    bool replicated = false;
    std::vector<std::string> sets;
};

PredictArgs parse_args(const std::vector<std::string>& args) {
    PredictArgs a;
    for (size_t i = 0; i < args.size(); ++i) {
        const std::string& arg = args[i];
        if (take_set(args, i, a.sets, kPredictUsage))
            continue;
        if (arg == "--replicated") {
            a.replicated = true;
            continue;
        }
        if (arg == "--data" || arg == "--out" || arg == "--config" || arg == "--samples") {
            if (i + 1 >= args.size())
                throw UsageError(fmt::format("{} needs a value", arg), kPredictUsage);
            const std::string& v = args[++i];
            if (arg == "--samples") {
                a.samples = parse_positive(arg, v, kPredictUsage);
            } else {
                (arg == "--data" ? a.data : arg == "--out" ? a.out : a.config) = v;
            }
        } else if (!arg.empty() && arg[0] == '-') {
            throw UsageError(fmt::format("unknown option '{}'", arg), kPredictUsage);
        } else if (a.model_dir.empty()) {
            a.model_dir = arg;
        } else {
            throw UsageError(fmt::format("unexpected argument '{}'", arg), kPredictUsage);
        }
    }
    if (a.model_dir.empty())
        throw UsageError("predict needs a MODEL_DIR", kPredictUsage);
    if (a.data.empty())
        throw UsageError("predict needs --data synthetic|PATH", kPredictUsage);
    if (a.out.empty())
        throw UsageError("predict needs --out FILE.csv|FILE.bin", kPredictUsage);
    const std::string ext = fs::path(a.out).extension().string();
    if (ext != ".csv" && ext != ".bin")
        throw UsageError(fmt::format("--out '{}' must end in .csv or .bin", a.out), kPredictUsage);
    return a;
}

std::string scores_text(const std::string& out, const std::vector<float>& logits) {
    std::string text;
    const bool csv = fs::path(out).extension() == ".csv";
    if (csv) {
        text = "score\n";
        for (float logit : logits) {
            // As `eval --predictions` writes its scores: the same digits for the same logit.
            const double score = 1.0 / (1.0 + std::exp(-static_cast<double>(logit)));
            char buf[32];
            std::snprintf(buf, sizeof(buf), "%.9g\n", score);
            text += buf;
        }
        return text;
    }
    text.resize(logits.size() * sizeof(float));
    for (size_t i = 0; i < logits.size(); ++i) {
        const float score = score_of(logits[i]);
        std::memcpy(&text[i * sizeof(float)], &score, sizeof(float));  // little-endian hosts
    }
    return text;
}

// The tables sharded over pg's ranks by the config's plan, each shard's rows read from the
// model directory alone.
std::unique_ptr<ShardedEmbeddingBagCollection> sharded_model(
    const Config& config,
    const train::QuantizedModel& model,
    const std::shared_ptr<comm::ProcessGroup>& pg) {
    const std::vector<const train::QuantizedTable*> tables = model_tables(config, model);
    Topology topology = resolve_topology(config.sharding.topology, "cpu", pg->size());
    topology.local_size = std::min(comm::process_info().local_size, pg->size());
    ShardingPlan plan = make_sharding_plan(config, topology);
    // The quantized rows are read from the model directory as stored (mapped), whatever kernel
    // trained the table: a key_value or fused_uvm table of the run's config is looked up so too.
    std::string moved;
    for (auto& [name, ps] : plan.tables) {
        if (ps.compute_kernel != EmbeddingComputeKernel::kFused &&
            ps.compute_kernel != EmbeddingComputeKernel::kDense) {
            moved += fmt::format("{}{} ({})", moved.empty() ? "" : ", ", name,
                                 compute_kernel_name(ps.compute_kernel));
            ps.compute_kernel = EmbeddingComputeKernel::kFused;
            ps.cache_params.reset();
        }
    }
    if (!moved.empty() && pg->rank() == 0)
        log::root().info("predict: tables {} are looked up from their mapped quantized rows",
                         moved);
    log::root().info("sharding plan for {} ranks:\n{}", pg->size(),
                     plan_table(plan, config.model.tables, PlanTableOptions{}));
    QuantizedShardRows rows;
    rows.type = [tables](int64_t t) { return tables.at(static_cast<size_t>(t))->type; };
    rows.rows = [tables, &model](int64_t t, int64_t row_offset, int64_t n) {
        return train::read_quantized_rows(model, *tables.at(static_cast<size_t>(t)), row_offset, n);
    };
    return std::make_unique<ShardedEmbeddingBagCollection>(
        embedding_bag_configs(config.model), is_weighted(config.model), plan, pg,
        static_cast<uint64_t>(config.train.seed), kernels::FusedOptimizerParams{}, Device::cpu(),
        nullptr, QCommsConfig{}, "", nullptr, HierarchicalMode::kOff, std::move(rows));
}

// Criteo TSV files (FILE or FILE,FILE,...) as binary shards in OUT.tsv-shards, each value hashed
// to its row as the model's training data was: the record layout (rows, multi-hot, raw ids) of
// the manifest at the config's data.criteo_binary.path. Rank 0 writes them while the others wait.
std::string tsv_shards(const Config& config,
                       const std::string& files,
                       const std::string& out,
                       comm::ProcessGroup* pg) {
    std::vector<std::string> inputs;
    for (size_t begin = 0; begin <= files.size();) {
        const size_t end = std::min(files.find(',', begin), files.size());
        inputs.push_back(files.substr(begin, end - begin));
        begin = end + 1;
    }
    for (const std::string& f : inputs) {
        SR_CHECK(fs::exists(f), "--data '{}': '{}' does not exist", files, f);
        SR_CHECK(fs::is_regular_file(f),
                 "--data '{}': '{}' is neither a directory of Criteo "
                 "shards nor a Criteo TSV file",
                 files, f);
    }
    SR_CHECK(config.data.type == "criteo_binary" && !config.data.criteo_binary.path.empty(),
             "--data {}: a Criteo TSV is hashed into rows as the model's training data was, and "
             "the model's config has data.type '{}', not criteo_binary with the training data's "
             "manifest at data.criteo_binary.path; preprocess the TSV with `shardrec data "
             "criteo-preprocess` as the training data was and pass that directory",
             files, config.data.type);
    const data::CriteoManifest trained = data::read_criteo_manifest(config.data.criteo_binary.path);
    const std::string dir = out + ".tsv-shards";
    if (pg == nullptr || pg->rank() == 0) {
        fs::remove_all(dir);
        data::CriteoPreprocessOptions o;
        o.inputs = inputs;
        o.out_dir = dir;
        o.layout = trained.layout;
        o.bad_line_hint = "predict scores every line of its input: mend or remove that line";
        data::CriteoPreprocessSummary summary;
        try {
            summary = data::preprocess_criteo(o);
            SR_CHECK(summary.rows > 0, "--data {}: no lines to score", files);
        } catch (...) {
            fs::remove_all(dir);
            throw;
        }
        log::root().info("predict: {} rows of {} hashed as {} ({})", summary.rows, files,
                         config.data.criteo_binary.path, dir);
    }
    if (pg != nullptr)
        pg->barrier().wait();
    return dir;
}

// Shards scored with a model of Criteo data: each of the model's features must hold its ids as
// the training data's did (raw, or mod the same rows with the same multi-hot), or the lookups
// would take rows of other values without a word. Nothing to compare when the training data's
// manifest is not there.
void check_layout_as_trained(const Config& config,
                             const std::string& trained_dir,
                             const std::string& scored_dir) {
    if (trained_dir.empty() ||
        !fs::is_regular_file(fs::path(trained_dir) / data::kCriteoManifestName))
        return;
    const data::CriteoRecordLayout trained = data::read_criteo_manifest(trained_dir).layout;
    const data::CriteoRecordLayout scored = data::read_criteo_manifest(scored_dir).layout;
    const auto text = [](const data::CriteoRecordLayout& l, int c) {
        const auto t = static_cast<size_t>(c);
        return l.raw(c)
                   ? std::string("raw 64-bit ids")
                   : fmt::format("ids mod {} ({} a sample)", l.num_embeddings[t], l.multi_hot[t]);
    };
    const std::vector<std::string> columns = data::criteo_sparse_feature_names();
    for (const ModelConfig::Table& t : config.model.tables) {
        for (const std::string& f : t.feature_names) {
            const auto it = std::find(columns.begin(), columns.end(), f);
            if (it == columns.end())
                continue;  // the dataset names it
            const auto c = static_cast<int>(it - columns.begin());
            SR_CHECK(text(scored, c) == text(trained, c),
                     "--data {}: feature '{}' holds {}, but the model's training data {} held "
                     "{}: preprocess it as the training data was (the same --max-ind-range, "
                     "--raw-ids and --multi-hot), or pass the TSV files themselves",
                     scored_dir, f, text(scored, c), trained_dir, text(trained, c));
        }
    }
}

// Bytes of stored rows the lookups read per second of lookup.
double lookup_rate(const QuantEmbeddingBagCollection* qebc,
                   const ShardedEmbeddingBagCollection* sharded) {
    const double bytes =
        static_cast<double>(qebc ? qebc->bytes_read() : sharded->quant_bytes_read());
    const double seconds = qebc ? qebc->lookup_seconds() : sharded->quant_lookup_seconds();
    return bytes / std::max(seconds, 1e-9);
}

}  // namespace

int predict_main(const std::vector<std::string>& args) {
    for (const std::string& arg : args) {
        if (arg == "--help" || arg == "-h") {
            if (comm::process_info().rank == 0)
                std::fputs(kPredictUsage, stdout);
            return 0;
        }
    }
    const PredictArgs a = parse_args(args);
    kernels::set_row_invariant_gemms(true);  // a score whatever its batch and threads
    const int rank = comm::process_info().rank;
    const int world = comm::process_info().world_size;
    check_output_file("--out", a.out);
    SR_CHECK(fs::is_directory(a.model_dir), "model directory '{}' does not exist", a.model_dir);
    const train::QuantizedModel model = train::read_quantized_model(a.model_dir);

    Config config = load_config(model_config_path(a.config, model), a.sets);
    if (std::getenv("SHARDREC_LOG_LEVEL") == nullptr)
        log::set_level(config.runtime.log_level);
    SR_CHECK(config.model.type == model.model_type,
             "quantized model {} is a '{}' model, the config's is '{}'", a.model_dir,
             model.model_type, config.model.type);
    std::shared_ptr<comm::ProcessGroup> pg = train::default_process_group();
    data::Split split = data::Split::kEval;
    const bool json = fs::path(a.data).extension() == ".json";
    std::string tsv_dir;  // Criteo TSV input: its shards, removed by rank 0 at the end

    struct RemoveAtEnd {  // done or failed
        std::string dir;

        ~RemoveAtEnd() {
            std::error_code ec;
            if (!dir.empty())
                fs::remove_all(dir, ec);
        }
    } remove_tsv_dir;

    if (json) {
        split = data::Split::kTrain;
    } else if (a.data != "synthetic") {
        if (!fs::is_directory(a.data))
            tsv_dir = tsv_shards(config, a.data, a.out, pg.get());
        if (rank == 0)
            remove_tsv_dir.dir = tsv_dir;
        if (tsv_dir.empty() && config.data.type == "criteo_binary")
            check_layout_as_trained(config, config.data.criteo_binary.path, a.data);
        // Every row of the shards: no eval split is held out.
        config.data.type = "criteo_binary";
        config.data.criteo_binary.path = tsv_dir.empty() ? a.data : tsv_dir;
        config.data.criteo_binary.eval_days = 0;
        config.data.criteo_binary.eval_fraction = 0.0;
        config.train.eval_samples = 0;
        split = data::Split::kTrain;
    } else {
        SR_CHECK(config.data.type == "synthetic",
                 "--data synthetic, but the config's data.type is '{}'; pass --data PATH",
                 config.data.type);
    }
    const int threads = train::configure_threads(config);
    const std::unique_ptr<data::Dataset> dataset =
        json ? examples_dataset(a.data, score_schema(config)) : data::make_dataset(config);
    const int64_t rows = dataset->num_samples(split);
    int64_t total = a.samples;
    if (total < 0)
        total = rows >= 0 ? rows : config.train.eval_samples;
    SR_CHECK(total > 0, "nothing to score: {}",
             rows == 0 ? fmt::format("'{}' holds no {}", a.data, json ? "examples" : "rows")
                       : "train.eval_samples is 0 and no --samples S was given");
    SR_CHECK(rows < 0 || total <= rows, "--samples {} but '{}' holds only {} rows", total, a.data,
             rows);

    std::unique_ptr<EmbeddingBagCollectionInterface> sparse;
    QuantEmbeddingBagCollection* qebc = nullptr;
    ShardedEmbeddingBagCollection* sharded = nullptr;
    if (world > 1 && !a.replicated) {
        auto s = sharded_model(config, model, pg);
        sharded = s.get();
        sparse = std::move(s);
    } else {
        auto q = std::make_unique<QuantEmbeddingBagCollection>(quant_tables(config, model),
                                                               is_weighted(config.model));
        qebc = q.get();
        sparse = std::move(q);
    }
    const std::unique_ptr<RecModel> rec =
        make_model(config.model, static_cast<uint64_t>(config.train.seed), std::move(sparse));
    train::load_quantized_dense(rec->parameters(), model);
    // Managed-collision tables: raw ids to rows through the trained remap, read-only.
    train::ManagedCollisionTables mc(config.model, static_cast<uint64_t>(config.train.seed));
    train::load_quantized_remap(mc, model);

    // Chunk c = samples [c*B, min((c+1)*B, total)) on rank c mod world.
    const int64_t B = config.data.batch_size;
    const int64_t chunks = (total + B - 1) / B;
    const int64_t my_chunks = chunks > rank ? (chunks - rank + world - 1) / world : 0;
    log::root().info(
        "predict: {} samples of '{}' in {} chunks of {} on {} rank(s), {} thread(s) "
        "each; model {} ({} tables, {:.2f} MB)",
        total, a.data, chunks, B, world, threads, a.model_dir, model.tables.size(),
        static_cast<double>(model.table_bytes()) / 1e6);
    std::vector<float> logits;
    logits.reserve(static_cast<size_t>(my_chunks * B));
    train::Progress progress(my_chunks, std::max<int64_t>(1, my_chunks / 10));
    const auto start = std::chrono::steady_clock::now();
    int64_t done = 0;
    const int64_t rounds = (chunks + world - 1) / world;
    for (int64_t k = 0; k < rounds; ++k) {
        const int64_t c = k * world + rank;
        if (c >= chunks && sharded == nullptr)
            break;
        const int64_t scored = c < chunks ? c : 0;  // a sharded lookup needs every rank
        const int64_t count = std::min(B, total - scored * B);
        Batch batch = dataset->batch(scored * B, count, split);
        if (!mc.empty())
            batch = mc.remap_eval(batch);
        const Tensor& out = rec->forward(batch, Stream::cpu());
        if (c >= chunks)
            continue;
        logits.insert(logits.end(), out.data<float>(), out.data<float>() + count);
        done += count;
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        progress.update(k + 1, std::nan(""), static_cast<double>(done * world) / std::max(s, 1e-9));
    }
    progress.finish();
    const double local_s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();

    // Gather: rank r's k-th chunk is chunk r + k*world.
    std::vector<float> all;  // every score, on rank 0
    std::vector<int64_t> counts(static_cast<size_t>(world), 0);
    for (int64_t c = 0; c < chunks; ++c)
        counts[static_cast<size_t>(c % world)] += std::min(B, total - c * B);
    double wall_s = local_s, lookup_gbps = 0;
    // The stored table bytes a rank holds (the largest rank's): all of them unless sharded.
    double held_mb = static_cast<double>(rec->sparse_arch().parameter_bytes()) / 1e6;
    if (pg != nullptr && world > 1) {
        // To rank 0 alone, which writes them (an all-to-all whose other segments are empty):
        // the other ranks hold their own scores only.
        const Tensor mine = Tensor::from_vector(logits);
        std::vector<int64_t> send(static_cast<size_t>(world), 0);
        send[0] = mine.numel();
        std::vector<int64_t> receive(static_cast<size_t>(world), 0);
        if (rank == 0)
            receive = counts;
        Tensor gathered = Tensor::empty({rank == 0 ? total : 0}, DType::kF32);
        pg->all_to_all_v(mine, send, gathered, receive).wait();
        if (rank == 0) {
            all.resize(static_cast<size_t>(total));
            std::vector<int64_t> rank_begin(static_cast<size_t>(world), 0);
            for (int r = 1; r < world; ++r)
                rank_begin[static_cast<size_t>(r)] =
                    rank_begin[static_cast<size_t>(r - 1)] + counts[static_cast<size_t>(r - 1)];
            std::vector<int64_t> taken(static_cast<size_t>(world), 0);
            for (int64_t c = 0; c < chunks; ++c) {
                const auto r = static_cast<size_t>(c % world);
                const int64_t count = std::min(B, total - c * B);
                std::memcpy(all.data() + c * B, gathered.data<float>() + rank_begin[r] + taken[r],
                            static_cast<size_t>(count) * sizeof(float));
                taken[r] += count;
            }
        }
        // f32 is enough for a time and a rate.
        Tensor mx = Tensor::from_vector<float>({static_cast<float>(local_s)});
        Tensor rate = Tensor::from_vector<float>({static_cast<float>(lookup_rate(qebc, sharded))});
        Tensor held = Tensor::from_vector<float>({static_cast<float>(held_mb)});
        pg->all_reduce(mx, comm::ReduceOp::kMax).wait();
        pg->all_reduce(rate, comm::ReduceOp::kSum).wait();
        pg->all_reduce(held, comm::ReduceOp::kMax).wait();
        wall_s = mx.data<float>()[0];
        held_mb = held.data<float>()[0];
        lookup_gbps = rate.data<float>()[0] / world / 1e9;  // the ranks' mean
    } else {
        all = logits;
        lookup_gbps = lookup_rate(qebc, sharded) / 1e9;
    }
    if (rank != 0)
        return 0;
    write_file_atomically(a.out, scores_text(a.out, all));
    // The ceiling: one process's memcpy over the kernels' threads (a smaller buffer than the
    // default, still far beyond the caches, to keep the summary quick).
    const double copy_gbps = kernels::host_copy_gbps(size_t{128} << 20, 3);
    const double rate = static_cast<double>(total) / std::max(wall_s, 1e-9);
    log::root().info(
        "predict: {} samples in {:.3f} s, {:.0f} samples/s on {} rank(s) ({}); tables {:.2f} "
        "MB on the largest rank of {:.2f} MB; lookup {:.2f} GB/s per rank ({:.1f}% of the host "
        "memcpy ceiling {:.2f} GB/s); wrote {}",
        total, wall_s, rate, world, sharded ? "tables sharded" : "tables replicated", held_mb,
        static_cast<double>(model.table_bytes()) / 1e6, lookup_gbps,
        100.0 * lookup_gbps / copy_gbps, copy_gbps, a.out);
    fmt::print(R"({{"kind":"predict","samples":{},"seconds":{},"samples_per_s":{},"ranks":{},)"
               R"("sharded":{},"table_mb_per_rank":{},"table_mb":{},)"
               R"("lookup_gbps":{},"host_copy_gbps":{},"weights":"{}","model":"{}","out":"{}"}})"
               "\n",
               total, train::json_number(wall_s), train::json_number(rate), world,
               sharded ? "true" : "false", train::json_number(held_mb),
               train::json_number(static_cast<double>(model.table_bytes()) / 1e6),
               train::json_number(lookup_gbps), train::json_number(copy_gbps),
               kernels::quant_type_name(model.weights), a.model_dir, a.out);
    std::fflush(stdout);
    return 0;
}

}  // namespace shardrec::cli
