/*
 * The one lock of the C types (PendingCore's send lock, OutboundQueue's stream lock): a
 * PyThread lock with threading.Lock's methods, so the Python twins can hold a
 * threading.Lock and callers cannot tell them apart.
 *
 * A PyThread lock works on every supported version, free-threaded builds included. A
 * blocking take releases the GIL while it waits, so a thread that holds the lock while it
 * runs Python code never deadlocks one that waits for it, and, as threading.Lock's, runs
 * the handlers of the signals that interrupt the wait: one that raises (Ctrl-C's
 * KeyboardInterrupt) ends it, the lock not taken.
 */
#include "_speedups.h"

LBS_INTERNAL int
lbs_lock_take(PyThread_type_lock lock, int blocking)
{
    if (PyThread_acquire_lock(lock, NOWAIT_LOCK))
        return 1;
    if (!blocking)
        return 0;
    for (;;) {
        PyLockStatus got;
        Py_BEGIN_ALLOW_THREADS
        got = PyThread_acquire_lock_timed(lock, -1, 1);
        Py_END_ALLOW_THREADS
        if (got == PY_LOCK_ACQUIRED)
            return 1;
        /* PY_LOCK_INTR, a signal: run its handlers as threading.Lock's acquire does
         * (KeyboardInterrupt raises here, the lock not taken), then wait on. */
        if (Py_MakePendingCalls() < 0)
            return -1;
    }
}

LBS_INTERNAL PyObject *
lbs_lock_acquire(PyThread_type_lock lock, PyObject *const *args, Py_ssize_t nargsf,
                 PyObject *kwnames)
{
    Py_ssize_t nargs = PyVectorcall_NARGS(nargsf);
    Py_ssize_t nkw = kwnames == NULL ? 0 : PyTuple_GET_SIZE(kwnames);
    int blocking = 1;
    if (nargs + nkw > 1 ||
        (nkw == 1 && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
                                                      "blocking") != 0)) {
        PyErr_SetString(PyExc_TypeError, "acquire(blocking=True)");
        return NULL;
    }
    if (nargs + nkw == 1 && (blocking = PyObject_IsTrue(args[0])) < 0)
        return NULL;
    int taken = lbs_lock_take(lock, blocking);
    if (taken < 0)
        return NULL;
    return PyBool_FromLong(taken);
}

LBS_INTERNAL PyObject *
lbs_lock_release(PyThread_type_lock lock)
{
    /* A release of a free lock is refused, as threading.Lock refuses it (and a PyThread
     * lock released twice is undefined behaviour). */
    if (PyThread_acquire_lock(lock, NOWAIT_LOCK)) {
        PyThread_release_lock(lock);
        PyErr_SetString(PyExc_RuntimeError, "release unlocked lock");
        return NULL;
    }
    PyThread_release_lock(lock);
    Py_RETURN_NONE;
}

LBS_INTERNAL PyObject *
lbs_lock_locked(PyThread_type_lock lock)
{
    if (PyThread_acquire_lock(lock, NOWAIT_LOCK)) {
        PyThread_release_lock(lock);
        Py_RETURN_FALSE;
    }
    Py_RETURN_TRUE;
}
