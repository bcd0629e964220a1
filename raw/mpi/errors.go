package mpi

import "strconv"

// ErrorCode is what an MPI function returns: Success (MPI_SUCCESS, 0) or an error code,
// whose class MPI_Error_class gives (ErrComm, ErrTruncate ...). It is an error; compare
// with errors.Is(err, mpi.ErrorCode(mpi.ErrTruncate)) for a code that is its own class,
// as every predefined code of Open MPI is.
type ErrorCode int32

// Error is the library's text for the code (MPI_Error_string) when libmpi is loaded, else
// the number: "mpi: error code 5".
func (e ErrorCode) Error() string {
	if lib.Loaded() {
		var buf [MaxErrorString]byte
		var n int32
		if err := ErrorString(int32(e), &buf[0], &n); err == nil && n > 0 && int(n) <= len(buf) {
			return "mpi: " + string(buf[:n])
		}
	}
	return "mpi: error code " + strconv.Itoa(int(e))
}

// resultError turns what an MPI function returned into an error: nil for Success, else
// the ErrorCode. The success path allocates nothing.
func resultError(r ErrorCode) error {
	if r == Success {
		return nil
	}
	return r
}
