/*
 * The publish_async fast path of liftbridge_sync._speedups: what
 * Publisher.submit_value and H2PublishStream.send_framed do for the common case (a bytes
 * value to a partition, an acked policy, an open HTTP/2 publish stream, room in flight),
 * in one call and without running Python code. About a microsecond of bytecode per
 * publish_async, half of the calling thread's share.
 *
 *   setup_submit(deque_type, heads, no_ack)
 *       collections.deque, the publisher's cache of request heads ((stream, partition,
 *       policy) -> bytes) and AckPolicy.NONE. Until it is set up, submit_plain returns
 *       None.
 *   submit_plain(core, stream, value, partition, ack_policy, timeout, direct=False)
 *           -> future | (future, todo, stream) | entry | None
 *       core: the pending table's PendingCore (_speedups_table.c).
 *       future: the publish is entered in the pending table and the deadline queue, and
 *       its framed request queued on the stream, as the Python path would. (future,
 *       todo, stream): the same, and the caller still does what todo says (TODO_* below:
 *       wake the publisher thread, write the stream's queue itself or wake its I/O
 *       thread). entry: the publish's Entry (and future) is made, but it could not be
 *       entered here (a lock is held, no slot or threads in line for one, no open
 *       HTTP/2 stream's queue, ...): the caller enters it by the Python path. None: nothing made (not the
 *       common case, not set up, or too large): the caller does it all in Python.
 *       direct: a publish() caller, about to wait for this ack, as send_framed's direct
 *       (it writes the queue itself when nobody else is: TODO_WRITE_DIRECT).
 *
 * Locks. The Python path holds the send lock (the PendingCore's own lock) and the
 * stream's lock (its OutboundQueue's own lock, _speedups_outbound.c) while it enters a
 * publish. Here both are taken without waiting (try-acquire, the send lock first, as the
 * Python path nests them; either held by another thread: the caller takes the Python
 * path, which waits), and everything entered is changed holding both, so no thread sees
 * half of it. The queue is the one the PendingCore was given with its live stream
 * (core.outbound); no attribute of a Python object is read. Everything built before (the
 * framed request, the entry, its future) may run Python code (the clock, the future's
 * class); nothing is shared yet then. What is touched under the locks is checked to be
 * of the exact built-in types (dict with str keys: correlation ids are plain str, see
 * Client.publish_async; deque). On a free-threaded build the same holds: the locks are
 * real mutexes there too, the dicts and deques lock themselves, and the entry is not
 * shared until it is in the table.
 */
#include "_speedups.h"

/* What the caller of submit_plain still does (bits of todo). TODO_WRITE_DIRECT (a
 * publish() caller, nobody combining and no wake-up on its way): write the queue itself
 * if the stream's I/O lock is free, else wake the I/O thread. */
enum { TODO_WAKE_OWNER = 1, TODO_WAKE_STREAM = 2, TODO_WRITE_HERE = 4, TODO_WRITE_DIRECT = 8 };

static PyTypeObject *deque_type = NULL;
static PyObject *heads = NULL, *no_ack = NULL, *n_append = NULL;

LBS_INTERNAL PyObject *
setup_submit(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3 || !PyType_Check(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "setup_submit(deque_type, heads: dict, no_ack)");
        return NULL;
    }
    if (n_append == NULL && (n_append = PyUnicode_InternFromString("append")) == NULL)
        return NULL;
    Py_XSETREF(deque_type, (PyTypeObject *)Py_NewRef(args[0]));
    Py_XSETREF(heads, Py_NewRef(args[1]));
    Py_XSETREF(no_ack, Py_NewRef(args[2]));
    Py_RETURN_NONE;
}

/*
 * Enters entry (new, not yet shared) in the pending table and queues framed on its
 * stream, as PendingTable.admit and H2PublishStream.send_framed would: 1 done (*todo and
 * *stream_out, borrowed, set), 0 not possible here (nothing changed), -1 error. Called
 * holding the core's lock.
 */
static int
enter(PendingCoreObject *core, PyObject *entry, PyObject *framed, PyObject *cid,
      PyObject *timeout, double deadline, int direct, int *todo, PyObject **stream_out)
{
    PyObject *pending = core->pending;
    PyObject *out_obj = core->outbound;
    if (outbound_queue_type == NULL || !Py_IS_TYPE(out_obj, outbound_queue_type) ||
        core->finished)
        return 0;
    OutboundQueueObject *out = (OutboundQueueObject *)out_obj;
    /* The stream's lock, held by another thread (the Python path waits for it): 0. */
    if (!lbs_lock_take(out->lock, 0))
        return 0;
    int result = 0;
    /* Threads in line for a slot (in_line) are served first: this one joins the line
     * by the Python path, however many slots are free. */
    if (out->done || out->close_requested || !PyList_CheckExact(out->frames) ||
        PyDict_GET_SIZE(pending) >= core->max_in_flight || core->in_line)
        goto unlock;
    int known = PyDict_Contains(pending, cid);
    if (known != 0) {
        result = known < 0 ? -1 : 0;
        goto unlock;
    }
    PyObject *expiry = PyDict_GetItemWithError(core->expiry, timeout);
    if (expiry == NULL) {
        result = PyErr_Occurred() ? -1 : 0; /* the Python path makes the queue */
        goto unlock;
    }
    if (!Py_IS_TYPE(expiry, deque_type))
        goto unlock;
    PyObject *seq = PyLong_FromLongLong(core->seq + 1);
    if (seq == NULL) {
        result = -1;
        goto unlock;
    }
    if (PyDict_SetItem(pending, cid, entry) < 0) {
        Py_DECREF(seq);
        result = -1;
        goto unlock;
    }
    PyObject *appended = PyObject_CallMethodOneArg(expiry, n_append, entry);
    if (appended == NULL) {
        /* Not entered after all (only MemoryError gets here): undo, then report. */
        PyObject *type, *exc, *tb;
        PyErr_Fetch(&type, &exc, &tb);
        if (PyDict_DelItem(pending, cid) < 0)
            PyErr_Clear();
        PyErr_Restore(type, exc, tb);
        Py_DECREF(seq);
        result = -1;
        goto unlock;
    }
    Py_DECREF(appended);
    core->seq++; /* handed out: the Python path would have taken it too */
    Py_SETREF(((EntryCoreObject *)entry)->fields[E_SEQ], seq); /* new_entry made it */
    if (PyList_Append(out->frames, framed) < 0) {
        /* Entered but not queued: it times out like a lost request (never silently). */
        result = -1;
        goto unlock;
    }
    out->queued_bytes += PyBytes_GET_SIZE(framed);
    out->asked++;
    int t = 0;
    if (deadline < core->sleep_until)
        t |= TODO_WAKE_OWNER;
    if (direct) {
        /* As H2PublishStream.send_framed with direct: acks are not gathered until this
         * one is read; a wake-up on its way takes it; a caller woken by the last
         * hand-over of acks leaves it to the last of them (combining). */
        out->direct_mark = out->asked;
        if (out->signalled)
            ;
        else if (out->combining) {
            out->combining--;
            out->deferred = 1;
        }
        else
            t |= TODO_WRITE_DIRECT;
    }
    else if (out->queued_bytes - out->taken_bytes >= out->write_here_at)
        t |= TODO_WRITE_HERE;
    else if (!out->signalled)
        t |= TODO_WAKE_STREAM;
    *todo = t;
    *stream_out = core->live;
    result = 1;
unlock:
    PyThread_release_lock(out->lock);
    return result;
}

LBS_INTERNAL PyObject *
submit_plain(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 && nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "submit_plain(core, stream, value, partition, "
                                         "ack_policy, timeout, direct=False)");
        return NULL;
    }
    int direct = nargs == 7 ? PyObject_IsTrue(args[6]) : 0;
    if (direct < 0)
        return NULL;
    PyObject *core_obj = args[0], *stream = args[1], *value = args[2], *partition = args[3],
             *policy = args[4], *timeout = args[5];
    if (heads == NULL || pending_core_type == NULL || !Py_IS_TYPE(core_obj, pending_core_type) ||
        !PyUnicode_CheckExact(stream) || !PyBytes_CheckExact(value) ||
        !PyLong_CheckExact(partition) ||
        !(PyFloat_CheckExact(timeout) || PyLong_CheckExact(timeout)) || policy == no_ack)
        Py_RETURN_NONE;
    if (entries_set_up() < 0)
        return NULL;
    PendingCoreObject *core = (PendingCoreObject *)core_obj;
    PyObject *prefix = core->prefix;
    PyObject *clock = core->clock;
    Py_ssize_t max_size = core->max_message;
    if (core->closing)
        Py_RETURN_NONE;
    PyObject *key = PyTuple_Pack(3, stream, partition, policy);
    if (key == NULL)
        return NULL;
    PyObject *head = PyDict_GetItemWithError(heads, key);
    Py_DECREF(key);
    if (head == NULL) {
        if (PyErr_Occurred())
            return NULL;
        Py_RETURN_NONE; /* the Python path makes it (and checks the stream name) */
    }
    if (!PyBytes_CheckExact(head))
        Py_RETURN_NONE;
    Py_INCREF(head);
    Py_INCREF(prefix);
    Py_INCREF(clock);
    PyObject *result = NULL, *n = NULL, *now = NULL, *deadline_obj = NULL, *framed = NULL,
             *cid = NULL, *entry = NULL, *future = NULL;
    if ((n = PyLong_FromLongLong(core->ids++)) == NULL)
        goto done;
    if ((now = PyObject_CallNoArgs(clock)) == NULL)
        goto done;
    double started = PyFloat_AsDouble(now);
    if (started == -1.0 && PyErr_Occurred())
        goto done;
    double seconds = PyFloat_AsDouble(timeout); /* an int (ack_timeout=60) converts too */
    if (seconds == -1.0 && PyErr_Occurred())
        goto done;
    double deadline = started + seconds;
    if ((deadline_obj = PyFloat_FromDouble(deadline)) == NULL)
        goto done;
    if (frame_with_id(head, value, prefix, n, &framed, &cid) < 0)
        goto done;
    if (PyBytes_GET_SIZE(framed) > max_size) {
        result = Py_NewRef(Py_None); /* the Python path raises MessageTooLargeError */
        goto done;
    }
    PyObject *rest[4] = {partition, Py_True, timeout, deadline_obj};
    if ((entry = new_entry(framed, cid, rest, &future)) == NULL)
        goto done;
    int todo = 0;
    PyObject *live = NULL;
    /* The send lock, taken without waiting: held, the Python path waits for it. */
    int entered = 0;
    if (lbs_lock_take(core->lock, 0)) {
        entered = enter(core, entry, framed, cid, timeout, deadline, direct, &todo, &live);
        PyThread_release_lock(core->lock);
    }
    if (entered < 0)
        goto done;
    if (entered == 0)
        result = Py_NewRef(entry);
    else if (todo == 0)
        result = Py_NewRef(future);
    else {
        PyObject *todo_obj = PyLong_FromLong(todo);
        if (todo_obj != NULL) {
            result = PyTuple_Pack(3, future, todo_obj, live);
            Py_DECREF(todo_obj);
        }
    }
done:
    Py_DECREF(head);
    Py_DECREF(prefix);
    Py_DECREF(clock);
    Py_XDECREF(n);
    Py_XDECREF(now);
    Py_XDECREF(deadline_obj);
    Py_XDECREF(framed);
    Py_XDECREF(cid);
    Py_XDECREF(entry);
    Py_XDECREF(future);
    return result;
}
