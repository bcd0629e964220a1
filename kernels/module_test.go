package kernels

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeDriver models a CUDA context with loaded modules: it parses nothing
// but checks what a real driver would reject.
type fakeDriver struct {
	mu        sync.Mutex
	next      uintptr
	loaded    map[uintptr][]byte
	loadErr   error
	getErr    map[string]error
	unloadErr error
	unloads   int
}

func newFakeDriver() *fakeDriver {
	return &fakeDriver{next: 0x1000, loaded: map[uintptr][]byte{}, getErr: map[string]error{}}
}

var errFakeCUDA = errors.New("CUDA_ERROR_INVALID_PTX")

func (d *fakeDriver) moduleLoadData(image []byte) (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.loadErr != nil {
		return 0, d.loadErr
	}
	if len(image) == 0 || image[len(image)-1] != 0 {
		return 0, errors.New("PTX image not NUL-terminated")
	}
	d.next += 0x100
	d.loaded[d.next] = image
	return d.next, nil
}

func (d *fakeDriver) moduleGetFunction(mod uintptr, name string) (uintptr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := d.getErr[name]; err != nil {
		return 0, err
	}
	if _, ok := d.loaded[mod]; !ok {
		return 0, errors.New("CUDA_ERROR_INVALID_HANDLE")
	}
	entries := parseEntriesNoT(string(d.loaded[mod][:len(d.loaded[mod])-1]))
	for i, e := range entries {
		if e == name {
			return mod + uintptr(i) + 1, nil
		}
	}
	return 0, errors.New("CUDA_ERROR_NOT_FOUND")
}

func (d *fakeDriver) moduleUnload(mod uintptr) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.unloads++
	if _, ok := d.loaded[mod]; !ok {
		return errors.New("CUDA_ERROR_INVALID_HANDLE")
	}
	delete(d.loaded, mod)
	return d.unloadErr
}

func parseEntriesNoT(ptx string) []string {
	var names []string
	for _, m := range entryRE.FindAllStringSubmatch(ptx, -1) {
		names = append(names, m[1])
	}
	return names
}

func TestLoadResolvesEveryKernelFromTheEmbeddedPTX(t *testing.T) {
	d := newFakeDriver()
	m, err := load(d)
	require.NoError(t, err)
	seen := map[uintptr]bool{}
	for _, k := range Kinds() {
		f, err := m.Func(k)
		require.NoError(t, err, "%v", k)
		assert.NotZero(t, f)
		assert.False(t, seen[f], "%v shares a handle", k)
		seen[f] = true
	}
	require.Len(t, d.loaded, 1)
	for _, img := range d.loaded {
		assert.Equal(t, PTX()+"\x00", string(img))
	}
	require.NoError(t, m.Close())
	assert.Empty(t, d.loaded, "Close must unload the module")
}

func TestModuleFuncRejectsUnknownKindAndUseAfterClose(t *testing.T) {
	d := newFakeDriver()
	m, err := load(d)
	require.NoError(t, err)
	_, err = m.Func(Kind(7))
	require.ErrorIs(t, err, ErrKind)

	require.NoError(t, m.Close())
	require.NoError(t, m.Close(), "second Close is a no-op")
	assert.Equal(t, 1, d.unloads, "unloaded once")
	_, err = m.Func(BF16)
	require.ErrorIs(t, err, ErrClosed)

	var nilModule *Module
	_, err = nilModule.Func(BF16)
	require.Error(t, err)
	require.NoError(t, nilModule.Close())
}

func TestLoadReportsDriverFailures(t *testing.T) {
	tests := []struct {
		name        string
		setup       func(*fakeDriver)
		msg         string
		wantUnloads int
	}{
		{"load fails", func(d *fakeDriver) { d.loadErr = errFakeCUDA }, "load add kernels", 0},
		{"function missing", func(d *fakeDriver) { d.getErr[AddF16Name] = errFakeCUDA }, "function " + AddF16Name, 1},
		{"function missing and unload fails", func(d *fakeDriver) {
			d.getErr[AddF32Name] = errFakeCUDA
			d.unloadErr = errors.New("CUDA_ERROR_CONTEXT_IS_DESTROYED")
		}, "CONTEXT_IS_DESTROYED", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := newFakeDriver()
			tt.setup(d)
			m, err := load(d)
			require.Nil(t, m)
			require.ErrorIs(t, err, errFakeCUDA)
			assert.Contains(t, err.Error(), tt.msg)
			assert.Equal(t, tt.wantUnloads, d.unloads, "a failed load must not leak the module")
			assert.Empty(t, d.loaded)
		})
	}
}

func TestModuleCloseReportsUnloadFailure(t *testing.T) {
	d := newFakeDriver()
	m, err := load(d)
	require.NoError(t, err)
	d.unloadErr = errFakeCUDA
	err = m.Close()
	require.ErrorIs(t, err, errFakeCUDA)
	assert.Contains(t, err.Error(), "unload add kernels")
	_, err = m.Func(BF16)
	require.ErrorIs(t, err, ErrClosed, "the handles are gone even when unload failed")
}

func TestModuleIsSafeForConcurrentUse(t *testing.T) {
	d := newFakeDriver()
	m, err := load(d)
	require.NoError(t, err)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 100 {
				_, err := m.Func(Kinds()[i%len(Kinds())])
				if err != nil {
					assert.ErrorIs(t, err, ErrClosed)
				}
			}
		}()
	}
	require.NoError(t, m.Close())
	wg.Wait()
	assert.Equal(t, 1, d.unloads)
}
