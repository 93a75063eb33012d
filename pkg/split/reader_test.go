package split

import (
	"strings"
	"testing"

	"github.com/gttsplit/gttsplit/pkg/split/llamalog"
	"github.com/stretchr/testify/require"
)

// readLines parses lines (numbered from 1) as the fold does and reads
// their records with a new logReader, one record kind method at a time.
func readLines(t *testing.T, lines ...string) *logReader {
	t.Helper()
	p := llamalog.MustParser()
	rd := newLogReader()
	var scratch []byte
	for i, l := range lines {
		r, ok := p.Parse(uint64(i+1), llamalog.Payload([]byte(l), &scratch))
		require.True(t, ok, "not a relevant line: %q", l)
		r.Port = llamalog.RouterPort([]byte(l))
		rd.read(&r)
	}
	return rd
}

const (
	rdLoad    = "llama_model_loader: loaded meta data with 30 key-value pairs and 400 tensors from m.gguf (version GGUF V3 (latest))"
	rdModel   = "load_tensors:        ROCm0 model buffer size =  1000.00 MiB"
	rdCtx     = "llama_context: constructing llama_context"
	rdKV      = "llama_kv_cache:      ROCm0 KV buffer size =    64.00 MiB"
	rdCompute = "llama_context:      ROCm0 compute buffer size =    20.00 MiB"
	rdHead    = "llama_memory_breakdown_print: | memory breakdown [MiB] | total   free    self   model   context   compute    unaccounted |"
)

func TestReaderLoadTakesTheAnnouncedRole(t *testing.T) {
	t.Parallel()
	rd := readLines(t,
		"srv  load_model: loading draft model 'd.gguf'",
		strings.Replace(rdLoad, "m.gguf", "d.gguf", 1),
		rdLoad,
		"clip_model_loader: loaded meta data with 26 key-value pairs and 397 tensors from mm.gguf",
	)
	require.Len(t, rd.loads, 3)
	require.Equal(t, "draft", rd.loads[0].role)
	require.Equal(t, "d.gguf", rd.loads[0].file)
	require.Equal(t, "", rd.loads[1].role, "the role is the next load's only")
	require.True(t, rd.loads[2].mmproj, "a clip loader's load is an mmproj")
	require.Empty(t, rd.pending)
	require.True(t, rd.haveLoad)
}

func TestReaderModelBufferAfterAContextIsANewLoad(t *testing.T) {
	t.Parallel()
	rd := readLines(t, rdModel, rdModel, rdCtx, rdKV, rdModel)
	require.Len(t, rd.loads, 2, "a model line after a context opens a load; before one it is the same load's")
	require.Len(t, rd.loads[0].models, 2)
	require.False(t, rd.loads[0].marker, "opened by a buffer line")
	require.Len(t, rd.loads[0].ctxs, 1)
	require.Equal(t, 64.0, rd.loads[0].ctxs[0].kv)
	require.Same(t, rd.loads[1], rd.owner[0])
}

func TestReaderCacheAfterAReservationIsTheNextContext(t *testing.T) {
	t.Parallel()
	// Before b4881 no "constructing llama_context" is printed.
	rd := readLines(t, rdLoad, rdModel, rdKV, rdCompute, rdKV, rdCompute)
	require.Len(t, rd.loads, 1)
	require.Len(t, rd.loads[0].ctxs, 2)
	for _, x := range rd.loads[0].ctxs {
		require.Equal(t, 64.0, x.kv)
		require.Equal(t, 1, x.nReservations())
	}
}

func TestReaderBuffersBeforeAnyLoadArePseudo(t *testing.T) {
	t.Parallel()
	rd := readLines(t, rdKV, "[8081] "+rdKV, "llama_context: ROCm0 mystery buffer size = 3.00 MiB")
	require.Empty(t, rd.loads)
	require.Len(t, rd.pseudo, 2, "one per port")
	require.Equal(t, 64.0, rd.pseudo[8081].ctxs[0].kv)
	require.Len(t, rd.pseudo[0].unknown, 1)
	require.Equal(t, "unknown", rd.pseudo[0].unknown[0].Row)
}

func TestReaderCacheKindsGoToTheirRows(t *testing.T) {
	t.Parallel()
	rd := readLines(t, rdLoad, rdModel, rdCtx,
		"llama_kv_cache:        CPU KV buffer size =    8.00 MiB",
		"llama_memory_recurrent:      ROCm0 RS buffer size =     2.00 MiB",
		"llama_kv_cache: RPC0[10.0.0.2:50052] KV buffer size =    4.00 MiB",
		"dsv4_cache:      ROCm0 compressor state buffer size =     1.00 MiB",
		"llama_context:      ROCm0  output buffer size =     0.50 MiB",
		"llama_context:        CPU  output buffer size =     0.25 MiB",
	)
	x := rd.loads[0].ctxs[0]
	require.Equal(t, 8.0, x.hostKV)
	require.Equal(t, 2.0, x.rs)
	require.Equal(t, 1.0, x.other)
	require.Equal(t, 0.5, x.output)
	require.Equal(t, 0.25, x.hostOutput)
	var rows []string
	for _, bl := range x.lines {
		rows = append(rows, bl.Row)
	}
	require.Equal(t, []string{"host", "state", "remote", "state", "compute", "host"}, rows)
	require.Len(t, rd.warn, 1, "a state kind outside the KV/RS rule is named")
	require.Contains(t, rd.warn[0], "compressor state")
}

func TestReaderRouterStopEndsThePortsLoads(t *testing.T) {
	t.Parallel()
	rd := readLines(t,
		"srv  load_models: spawning server instance with name=a on port 8081",
		"[8081] "+rdLoad,
		"[8081] "+rdModel,
		"[8082] "+rdModel,
		"srv  unload: stopping model instance name=a",
		"srv  unload: stopping model instance name=b",
	)
	require.Len(t, rd.loads, 2)
	require.Contains(t, rd.loads[0].ended, "unloaded by the router (instance a, line 5)")
	require.Empty(t, rd.loads[1].ended, "another port's load stays live")
	require.Nil(t, rd.cur[8081])
	require.Nil(t, rd.owner[8081])
	require.Len(t, rd.warn, 1, "an instance of no known port is named")
	require.Contains(t, rd.warn[0], "instance b")
}

func TestReaderFitBrackets(t *testing.T) {
	t.Parallel()
	const (
		start     = "common_fit_params: fitting params to device memory, for bugs during this step try to reproduce them with -fit off"
		end       = "common_fit_params: fitting params to free memory took 0.52 seconds"
		projected = "llama_params_fit_impl: projected to use 5000 MiB of device memory vs. 20000 MiB of free device memory"
	)
	rd := readLines(t, start, start, end)
	require.Equal(t, []bracket{{start: 1, end: 3}}, rd.brackets, "a second start inside an open bracket is the same fit")

	rd = readLines(t, rdLoad, rdHead, projected)
	require.Equal(t, []bracket{{start: 2, end: 3}}, rd.brackets, "a projection closes a bracket from the table before it")

	rd = readLines(t, rdHead, rdLoad, projected)
	require.Empty(t, rd.brackets, "no table since the current load: nothing to set apart")
}

func TestReaderClipLines(t *testing.T) {
	t.Parallel()
	rd := readLines(t,
		"clip_ctx: CLIP using ROCm0 backend",
		"clip_model_load: Main model doesn't offload, fallback to CPU backend",
		"load_hparams: model size:     811.90 MiB",
		"clip_model_load: params backend buffer size =  811.90 MB (377 tensors)",
		"alloc_compute_meta:      ROCm0 compute buffer size =    30.00 MiB",
	)
	require.Len(t, rd.loads, 1)
	l := rd.loads[0]
	require.True(t, l.mmproj)
	require.Equal(t, "CPU", l.clipDev, "the fallback corrects the device")
	require.NotNil(t, l.clipSize)
	require.Equal(t, uint64(3), l.clipSize.Seq, "the first size line counts")
	require.Len(t, l.ctxs, 1)
	require.Equal(t, 1, l.ctxs[0].nReservations())
}

func TestReaderTableRowsFollowTheirHead(t *testing.T) {
	t.Parallel()
	const row = "llama_memory_breakdown_print: |   - ROCm0 (7900 XTX)   | 24560 = 20000 + (1084 =  1000 +      64 +      20) +        3476 |"
	rd := readLines(t, rdHead, row, row, rdLoad, row)
	require.Len(t, rd.tables, 1)
	require.Len(t, rd.tables[0].rows, 2, "a row not next to its table is stray")
}

func TestReaderMarkersOfTheFormat(t *testing.T) {
	t.Parallel()
	rd := readLines(t,
		"build: 4615 (bfcce4d6) with cc for x86_64-linux-gnu",
		"build: 9999 (abcdef12) with cc for x86_64-linux-gnu",
		"main: verbosity = 1",
		"main: verbosity = 5",
		"~llama_context:      ROCm0 compute buffer size of 330.5000 MiB, does not match expectation of 318.5000 MiB",
		"output_reserve: reallocating output buffer from size 0.58 MiB to 1.16 MiB",
		"llama_model_load: VRAM used: 4000 MB",
	)
	require.Equal(t, int64(4615), rd.build.Int, "the first build line")
	require.Equal(t, int64(1), rd.verbosity, "the first verbosity")
	require.False(t, rd.verbose, "a mismatch echo is printed at the default level")
	require.Len(t, rd.echoes, 1)
	require.True(t, rd.realloc)
	require.True(t, rd.legacy)
	require.Len(t, rd.warn, 1)

	rd = readLines(t, "~llama_context:      ROCm0 compute buffer size is 318.5000 MiB, matches expectation of 318.5000 MiB")
	require.True(t, rd.verbose, "a matching echo is a -v line")
	rd = readLines(t, "llama_context: max_nodes = 65536")
	require.True(t, rd.verbose)
}
