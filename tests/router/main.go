// Command llmd_indexer runs llm-d's own KV-cache indexer (github.com/llm-d/llm-d-kv-cache,
// the version go.mod pins) as llm-d wires it: an in-memory kvblock index, the kvevents
// Pool with the vLLM engine adapter, a SubscriberManager whose ZMQ subscribers feed the
// pool, and the indexer's ScoreTokens. kvtier's router test (test_llmd_indexer.py) drives
// it over stdin/stdout, one JSON object per line each way:
//
//	{"op":"subscribe","pod":P,"endpoint":E,"remote":true}  EnsureSubscriber(P, E, "kv@", remote)
//	{"op":"unsubscribe","pod":P}                           RemoveSubscriber(P)
//	{"op":"score","tokens":[...],"model":M}                ScoreTokens(tokens, M, nil, nil)
//	{"op":"replay","endpoint":E,"start":S}                 kvtier's replay (vLLM's protocol with
//	                                                       the topic frame): each batch to Pool.AddTask
//	{"op":"quit"}
//
// Each answer is {"ok":true,...} or {"ok":false,"error":"..."}. The indexer's
// configuration is llm-d's JSON, read from -config (the file docs/routers.md shows).
package main

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/go-zeromq/zmq4"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvcache/kvblock"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvevents"
	"github.com/llm-d/llm-d-kv-cache/pkg/kvevents/engineadapter"
	"go.uber.org/zap/zapcore"
	"sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"
)

// fileConfig is what -config holds: llm-d's indexer and event-pool configuration.
type fileConfig struct {
	Indexer        json.RawMessage               `json:"indexer"`
	TokenProcessor *kvblock.TokenProcessorConfig `json:"tokenProcessor"`
	KVEvents       *kvevents.Config              `json:"kvEvents"`
}

type request struct {
	Op       string   `json:"op"`
	Pod      string   `json:"pod"`
	Endpoint string   `json:"endpoint"`
	Remote   bool     `json:"remote"`
	Tokens   []uint32 `json:"tokens"`
	Model    string   `json:"model"`
	Start    uint64   `json:"start"`
}

func main() {
	configPath := flag.String("config", "", "llm-d indexer configuration (JSON)")
	verbose := flag.Int("v", 0, "llm-d log verbosity (4: DEBUG, shows dropped events)")
	flag.Parse()
	logger := zap.New(zap.WriteTo(os.Stderr), zap.Level(zapcore.Level(-*verbose)))
	log.SetLogger(logger)
	ctx, cancel := context.WithCancel(log.IntoContext(context.Background(), logger))
	defer cancel()

	fc := fileConfig{}
	if *configPath != "" {
		raw, err := os.ReadFile(*configPath)
		if err != nil {
			fail(err)
		}
		if err := json.Unmarshal(raw, &fc); err != nil {
			fail(fmt.Errorf("%s: %w", *configPath, err))
		}
	}
	cfg, err := kvcache.NewDefaultConfig()
	if err != nil {
		fail(err)
	}
	if len(fc.Indexer) > 0 {
		if err := json.Unmarshal(fc.Indexer, cfg); err != nil {
			fail(fmt.Errorf("indexer config: %w", err))
		}
	}
	if fc.KVEvents == nil {
		fc.KVEvents = kvevents.DefaultConfig()
	}
	// One token processor for both sides (ingest and scoring), as llm-d wires it.
	tp, err := kvblock.NewChunkedTokenDatabase(fc.TokenProcessor)
	if err != nil {
		fail(err)
	}
	indexer, err := kvcache.NewKVCacheIndexer(ctx, cfg, tp)
	if err != nil {
		fail(err)
	}
	go indexer.Run(ctx)
	adapter, err := engineadapter.NewAdapter(fc.KVEvents.EngineType)
	if err != nil {
		fail(err)
	}
	pool := kvevents.NewPool(fc.KVEvents, indexer.KVBlockIndex(), tp, adapter)
	pool.Start(ctx)
	subs := kvevents.NewSubscriberManager(pool)

	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	out := json.NewEncoder(os.Stdout)
	reply := func(v map[string]any, err error) {
		if err != nil {
			v = map[string]any{"ok": false, "error": err.Error()}
		} else {
			v["ok"] = true
		}
		_ = out.Encode(v)
	}
	reply(map[string]any{"ready": true}, nil)
	for in.Scan() {
		var req request
		if err := json.Unmarshal(in.Bytes(), &req); err != nil {
			reply(nil, err)
			continue
		}
		switch req.Op {
		case "subscribe":
			reply(map[string]any{}, subs.EnsureSubscriber(ctx, req.Pod, req.Endpoint, fc.KVEvents.TopicFilter, req.Remote))
		case "unsubscribe":
			subs.RemoveSubscriber(ctx, req.Pod)
			reply(map[string]any{}, nil)
		case "score":
			scores, err := indexer.ScoreTokens(ctx, req.Tokens, req.Model, nil, nil)
			reply(map[string]any{"scores": scores}, err)
		case "replay":
			n, err := replay(ctx, pool, req.Endpoint, req.Start)
			reply(map[string]any{"batches": n}, err)
		case "quit":
			subs.Shutdown(ctx)
			reply(map[string]any{}, nil)
			return
		default:
			reply(nil, fmt.Errorf("unknown op %q", req.Op))
		}
	}
}

// replay asks kvtier's replay endpoint for every buffered batch from `start` on (vLLM's
// request, plus kvtier's extra frame asking for each batch's topic) and hands each to the
// pool as its subscriber would. Returns how many batches came.
func replay(ctx context.Context, pool *kvevents.Pool, endpoint string, start uint64) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	dealer := zmq4.NewDealer(ctx)
	defer dealer.Close()
	if err := dealer.Dial(endpoint); err != nil {
		return 0, err
	}
	seq := make([]byte, 8)
	binary.BigEndian.PutUint64(seq, start)
	if err := dealer.Send(zmq4.NewMsgFrom(seq, []byte("topic"))); err != nil {
		return 0, err
	}
	n := 0
	for {
		msg, err := dealer.Recv()
		if err != nil {
			return n, err
		}
		if len(msg.Frames) != 3 || len(msg.Frames[0]) != 8 {
			return n, fmt.Errorf("replay: unexpected answer of %d frames", len(msg.Frames))
		}
		s := binary.BigEndian.Uint64(msg.Frames[0])
		if int64(s) == -1 {
			return n, nil
		}
		pool.AddTask(&kvevents.RawMessage{Topic: string(msg.Frames[2]), Sequence: s, Payload: msg.Frames[1]})
		n++
	}
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "llmd_indexer:", err)
	os.Exit(2)
}
