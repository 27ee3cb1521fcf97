/*
 * Optional C speedups of the publish hot path (CPython C API only). This file holds the
 * module, framing, settling and entries; scan_acks is in _speedups_acks.c, send_held and
 * recv_held in _speedups_io.c, the publish_async fast path in _speedups_submit.c, the
 * PendingCore type (the pending table's state and send lock) in _speedups_table.c, the
 * OutboundQueue type (an HTTP/2 publish stream's queue and lock) in _speedups_outbound.c,
 * the FutureCore and EntryCore types (a publish future's state, one pending publish) in
 * _speedups_future.c and _speedups_entry.c, and what they share in _speedups.h.
 *
 * Loaded through liftbridge_sync._wire.speedups, which has a pure-Python fallback for
 * every function here (frame_value, frame_id, frame_values and decode_ack are drop-ins
 * for the functions of liftbridge_sync._wire.publish_codec, chosen there), used when this
 * module is not built or when the environment variable LIFTBRIDGE_SYNC_NO_SPEEDUPS is
 * set. Every function is thread-safe under the GIL and keeps it throughout; none runs
 * Python code except run_callbacks (the callbacks it is given), the lock and deque
 * methods it is handed, a comparison of a future's state that is not the interned
 * "FINISHED", and submit_plain (the publisher's clock, its future class). No code here
 * looks up an attribute of a Python object: the futures, entries and acks it works on are
 * its own types' structs (FutureCore, EntryCore, AckCore: the bases of PublishFuture,
 * Entry and the public Ack).
 *
 *   frame_value(head, value, correlation_id) -> framed
 *       A framed PublishRequest: gRPC prefix, cached head (bytes), value (bytes) and
 *       the correlation id (bytes, already encoded).
 *   frame_id(head, value, prefix, n) -> (framed, correlation_id)
 *       A framed PublishRequest (gRPC prefix, cached head, value, id) and its id
 *       (prefix + decimal n).
 *   frame_values(head, values, base) -> (framed_list, id_list)
 *       The same for the leading exact-bytes items of a list, ids base + "." + index.
 *   frame_pairs(heads, items, base) -> (framed_list, id_list, partition_list)
 *       The same for the leading items that are bytes values or (key, value) tuples
 *       (key bytes or None, value bytes), the key's field after the head: heads[0] for
 *       every item when heads has one (a fixed partition), else heads[p] with p =
 *       crc32(key or b"") % len(heads) (ByKey's choice); the p of each item.
 *   decode_ack(message) -> Ack | None
 *       One PublishResponse message (bytes-like, no gRPC prefix) as scan_acks reads it:
 *       the Ack (partition -1) of a plain successful ack with a correlation id, None
 *       for anything else (malformed or unusual encodings included: see parse_response
 *       in _speedups_acks.c; protobuf reads those).
 *   scan_acks(buf, pos, stream_id, max_frame) -> (pos, acks, payload, control, pongs, windows)
 *       Reads, from pos on, whole HTTP/2 DATA frames of stream_id without flags, each
 *       holding whole gRPC messages only, each a PublishResponse with a successful
 *       ack carrying a correlation id, straight into Ack objects (partition -1: the
 *       caller knows it). Stops at the first frame that is anything else (partial,
 *       too long, other type/stream/flags, several or split messages, errors, odd or
 *       invalid encodings): the Python reader handles it and what follows. The
 *       connection's PINGs met on the way are answered (their ACK frames returned
 *       in pongs, for the connection to send; PING ACKs are dropped), and so are its
 *       empty SETTINGS frames (nothing to apply: their ACKs go in pongs); its SETTINGS and
 *       WINDOW_UPDATE frames (and our stream's WINDOW_UPDATE) are skipped
 *       and returned, concatenated, in control (for h2: their order relative to our
 *       stream's DATA does not matter), except WINDOW_UPDATEs with a non-zero
 *       increment: windows is None, or (connection increment, stream increment, their
 *       frames) for the caller to add to h2's windows itself (h2 parses a frame in
 *       tens of microseconds) or, where h2's state forbids that, to give h2.
 *   settle_acks(acks, pending, lock, owner) -> (count, ready)
 *       Resolves, under lock (the futures module's callback lock), the leading run of
 *       Ack objects (from scan_acks) with the publisher's entries (pending[correlation
 *       id], EntryCore objects: their future and partition): sets the ack's partition
 *       and the result and state of the future (a FutureCore). I/O thread (owner false): stops at an ack without an entry or
 *       whose future has a done-callback or is resolved; takes the entry out of
 *       pending. Owner thread (owner true): pops every entry; an ack without one,
 *       or for a future resolved meanwhile, is dropped. Returns how many acks it went
 *       through and the futures resolved that have done-callbacks or waiters
 *       (waited): the caller runs and notifies those, in order. A pending value that
 *       is no EntryCore, or a future no FutureCore, raises TypeError.
 *       Stops at the first object that is not an Ack (Python handles it and the rest).
 *   run_callbacks(futures, start) -> (index, errors)
 *       From futures[start] on (FutureCore objects), for resolved futures nobody waits
 *       on: takes their done-callbacks (the empty tuple: none; a list: several; anything
 *       else: the one callback), leaving the empty tuple, and calls each with the
 *       future, in order. Stops at the first future with waiters and returns its index
 *       (len(futures) at the end), with (future, exception) for each callback that
 *       raised an Exception or SystemExit (the caller logs them); any other
 *       BaseException propagates.
 *   setup(ack_type, policies)
 *       The Ack class (a subclass of AckCore) and the AckPolicy members (LEADER, ALL,
 *       NONE).
 *   send_held(fd, data) -> int
 *       One non-blocking send() of a bytes-like object on a socket file descriptor,
 *       *keeping the GIL*: the bytes sent, 0 if the socket would block; OSError
 *       otherwise. socket.send releases the GIL around the call, and a thread that
 *       released it waits up to the switch interval (5 ms) to get it back while
 *       another thread runs Python; the publish stream's I/O lock is held meanwhile.
 *       A non-blocking send on a connected socket takes microseconds.
 *   setup_entries(entry_type, future_type)
 *       The publisher's Entry class and its future class: Python subclasses of the
 *       EntryCore and FutureCore types (_speedups_entry.c, _speedups_future.c), whose
 *       state this code reads and writes in their structs.
 *   make_entries(framed, ids, partition, wants_ack, timeout, deadline) -> (entries, futures)
 *       For two lists of equal length (framed requests, correlation ids; partition an int,
 *       or a list of that length with each request's partition): one new future
 *       (future_type()) and one Entry per request, its fields filled as EntryCore's
 *       __init__ would (seq 0, resent_at 0.0, key None) without running it, and the
 *       Entry untracked by the cyclic garbage collector (see new_entry).
 *   make_entry(framed, correlation_id, partition, wants_ack, timeout, deadline) -> entry
 *       The same for one request (its future is entry.future).
 *   frame_entry(head, value, prefix, n, max_size, partition, wants_ack, timeout,
 *               deadline) -> entry | None
 *       frame_id and make_entry in one call (a publish_async): the Entry of the framed
 *       request, or None (no entry or future made) when it is longer than max_size bytes.
 *   pop_answered(queue, pending) -> bool
 *       Pops the entries no longer in the publisher's pending table (pending[its
 *       correlation id] is not that entry) off the head of a deadline queue (a deque);
 *       whether a pending entry is left at its head.
 *   recv_held(fd, size) -> bytes | None
 *       The same for one non-blocking recv() of up to size bytes: the bytes read
 *       (b"" at end of stream), None if none are waiting; OSError otherwise. Reads
 *       only what the socket holds (FIONREAD), so a small read allocates little.
 *   setup_submit(...), submit_plain(...)
 *       The publish_async fast path: see _speedups_submit.c.
 *   PendingCore(max_in_flight, max_message, id_prefix, clock)
 *       A type: the pending table's state in a C struct, with its own lock (see
 *       _speedups_table.c; twin: liftbridge_sync._publishing.pending_core).
 *   FutureCore(), EntryCore(framed, correlation_id, partition, wants_ack, future,
 *              timeout, deadline, seq=0, resent_at=0.0, key=None)
 *       Types: a publish future's state and one pending publish in C structs, the bases
 *       of PublishFuture and the publisher's Entry (see _speedups_future.c and
 *       _speedups_entry.c; twins in liftbridge_sync._publishing.futures and .pending).
 *   OutboundQueue(write_here_at)
 *       A type: an HTTP/2 publish stream's outbound queue, flags and lock (see
 *       _speedups_outbound.c; twin: liftbridge_sync._transport.h2.outbound_queue).
 */
#include "_speedups.h"

#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <structmember.h>

LBS_INTERNAL PyObject *ack_type = NULL;
LBS_INTERNAL PyObject *policies = NULL; /* tuple of 3 */
LBS_INTERNAL PyObject *empty_str = NULL;
LBS_INTERNAL PyObject *minus_one = NULL;
LBS_INTERNAL PyObject *zero = NULL;


/* The publisher's Entry and PublishFuture classes (subclasses of EntryCore and
 * FutureCore), which new_entry() makes. */
static PyTypeObject *entry_type = NULL;
static PyTypeObject *future_type = NULL;
LBS_INTERNAL PyObject *zero_float = NULL;

/* 0 once setup_entries() ran; -1 with RuntimeError before. */
LBS_INTERNAL int
entries_set_up(void)
{
    if (entry_type != NULL)
        return 0;
    PyErr_SetString(PyExc_RuntimeError, "setup_entries() not called");
    return -1;
}

static size_t
put_varint(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static size_t
varint_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* The framed request of head + key + value + id (id bytes given; key_len 0: no key field,
 * as protobuf leaves out an empty key). New reference. */
static PyObject *
build_keyed_frame(const char *head, Py_ssize_t head_len, const char *key, Py_ssize_t key_len,
                  const char *value, Py_ssize_t value_len, const char *id, Py_ssize_t id_len)
{
    size_t key_field = key_len > 0 ? 1 + varint_size((uint64_t)key_len) + (size_t)key_len : 0;
    size_t message = (size_t)head_len + key_field + 1 + varint_size((uint64_t)value_len) +
                     (size_t)value_len + 1 + varint_size((uint64_t)id_len) + (size_t)id_len;
    if (message > 0xFFFFFFFFu) {
        PyErr_SetString(PyExc_OverflowError, "request too large");
        return NULL;
    }
    PyObject *out = PyBytes_FromStringAndSize(NULL, (Py_ssize_t)(message + 5));
    if (out == NULL)
        return NULL;
    uint8_t *p = (uint8_t *)PyBytes_AS_STRING(out);
    p[0] = 0;
    p[1] = (uint8_t)(message >> 24);
    p[2] = (uint8_t)(message >> 16);
    p[3] = (uint8_t)(message >> 8);
    p[4] = (uint8_t)message;
    p += 5;
    memcpy(p, head, (size_t)head_len);
    p += head_len;
    if (key_len > 0) {
        *p++ = 0x0a; /* field 1 (key), length-delimited */
        p += put_varint(p, (uint64_t)key_len);
        memcpy(p, key, (size_t)key_len);
        p += key_len;
    }
    *p++ = 0x12; /* field 2 (value), length-delimited */
    p += put_varint(p, (uint64_t)value_len);
    memcpy(p, value, (size_t)value_len);
    p += value_len;
    *p++ = 0x3a; /* field 7 (correlationId), length-delimited */
    p += put_varint(p, (uint64_t)id_len);
    memcpy(p, id, (size_t)id_len);
    return out;
}

/* The framed request of head + value + id (id bytes given). New reference. */
static PyObject *
build_frame(const char *head, Py_ssize_t head_len, const char *value, Py_ssize_t value_len,
            const char *id, Py_ssize_t id_len)
{
    return build_keyed_frame(head, head_len, NULL, 0, value, value_len, id, id_len);
}

/* CRC-32 (IEEE, reflected 0xEDB88320: zlib.crc32's), for ByKey's choice in frame_pairs. */
static uint32_t crc32_table[256];

static void
init_crc32_table(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
        crc32_table[n] = c;
    }
}

static uint32_t
crc32_ieee(const uint8_t *data, Py_ssize_t size)
{
    uint32_t c = 0xFFFFFFFFu;
    for (Py_ssize_t i = 0; i < size; i++)
        c = crc32_table[(c ^ data[i]) & 0xFF] ^ (c >> 8);
    return c ^ 0xFFFFFFFFu;
}

/* An ASCII str from bytes. New reference. */
static PyObject *
ascii_str(const char *data, Py_ssize_t size)
{
    PyObject *s = PyUnicode_New(size, 127);
    if (s == NULL)
        return NULL;
    memcpy(PyUnicode_1BYTE_DATA(s), data, (size_t)size);
    return s;
}

static int
ascii_prefix(PyObject *prefix, const char **data, Py_ssize_t *size)
{
    if (!PyUnicode_CheckExact(prefix) || !PyUnicode_IS_ASCII(prefix)) {
        PyErr_SetString(PyExc_TypeError, "prefix must be an ASCII str");
        return -1;
    }
    *data = (const char *)PyUnicode_1BYTE_DATA(prefix);
    *size = PyUnicode_GET_LENGTH(prefix);
    return 0;
}

/* The framed request for head + value with the correlation id prefix + decimal n, and
 * that id (new references in *framed_out, *cid_out); -1 on error. */
LBS_INTERNAL int
frame_with_id(PyObject *head, PyObject *value, PyObject *prefix_obj, PyObject *n_obj,
              PyObject **framed_out, PyObject **cid_out)
{
    if (!PyBytes_CheckExact(head) || !PyBytes_CheckExact(value)) {
        PyErr_SetString(PyExc_TypeError, "head and value must be bytes");
        return -1;
    }
    const char *prefix;
    Py_ssize_t prefix_len;
    if (ascii_prefix(prefix_obj, &prefix, &prefix_len) < 0)
        return -1;
    long long n = PyLong_AsLongLong(n_obj);
    if (n == -1 && PyErr_Occurred())
        return -1;
    char small[256];
    char *id = small;
    Py_ssize_t cap = prefix_len + 24;
    if (cap > (Py_ssize_t)sizeof(small)) {
        id = PyMem_Malloc((size_t)cap);
        if (id == NULL) {
            PyErr_NoMemory();
            return -1;
        }
    }
    memcpy(id, prefix, (size_t)prefix_len);
    int digits = snprintf(id + prefix_len, 24, "%lld", n);
    Py_ssize_t id_len = prefix_len + digits;
    PyObject *framed = build_frame(PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head),
                                   PyBytes_AS_STRING(value), PyBytes_GET_SIZE(value), id, id_len);
    PyObject *cid = framed == NULL ? NULL : ascii_str(id, id_len);
    if (id != small)
        PyMem_Free(id);
    if (cid == NULL) {
        Py_XDECREF(framed);
        return -1;
    }
    *framed_out = framed;
    *cid_out = cid;
    return 0;
}

/* Appends obj, a new reference, to list and releases it; -1 on error (obj NULL: the
 * error of whatever failed to make it). */
static int
append_new(PyObject *list, PyObject *obj)
{
    if (obj == NULL)
        return -1;
    int rc = PyList_Append(list, obj);
    Py_DECREF(obj);
    return rc;
}

/* A buffer of the ASCII str base + "." with room for a decimal index after it (ids
 * base.index; *base_len: the length of base); PyMem_Free it. NULL with an error set. */
static char *
indexed_id_buffer(PyObject *base_obj, Py_ssize_t *base_len)
{
    const char *base;
    if (ascii_prefix(base_obj, &base, base_len) < 0)
        return NULL;
    char *id = PyMem_Malloc((size_t)(*base_len + 24));
    if (id == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    memcpy(id, base, (size_t)*base_len);
    id[*base_len] = '.';
    return id;
}

static PyObject *
frame_value(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "frame_value(head, value, correlation_id)");
        return NULL;
    }
    if (!PyBytes_CheckExact(args[0]) || !PyBytes_CheckExact(args[1]) ||
        !PyBytes_CheckExact(args[2])) {
        PyErr_SetString(PyExc_TypeError, "head, value and correlation_id must be bytes");
        return NULL;
    }
    return build_frame(PyBytes_AS_STRING(args[0]), PyBytes_GET_SIZE(args[0]),
                       PyBytes_AS_STRING(args[1]), PyBytes_GET_SIZE(args[1]),
                       PyBytes_AS_STRING(args[2]), PyBytes_GET_SIZE(args[2]));
}

static PyObject *
frame_id(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4) {
        PyErr_SetString(PyExc_TypeError, "frame_id(head, value, prefix, n)");
        return NULL;
    }
    PyObject *framed, *cid;
    if (frame_with_id(args[0], args[1], args[2], args[3], &framed, &cid) < 0)
        return NULL;
    PyObject *result = PyTuple_New(2);
    if (result == NULL) {
        Py_DECREF(framed);
        Py_DECREF(cid);
        return NULL;
    }
    PyTuple_SET_ITEM(result, 0, framed);
    PyTuple_SET_ITEM(result, 1, cid);
    return result;
}

/* What frame_values and frame_pairs share: the framed requests of the leading run of
 * items (bytes values; with pairs, (key, value) tuples too, key bytes or None) and their
 * ids base.index, as a tuple (framed_list, id_list), with pairs also the partition index
 * of each (partition_list). heads: count (>= 1) exact bytes, the caller's to keep. */
static PyObject *
frame_run(PyObject *const *heads, Py_ssize_t count, PyObject *items, PyObject *base_obj,
          int pairs)
{
    Py_ssize_t base_len;
    char *id = indexed_id_buffer(base_obj, &base_len);
    if (id == NULL)
        return NULL;
    PyObject *framed_list = PyList_New(0);
    PyObject *ids = PyList_New(0);
    PyObject *chosen = pairs ? PyList_New(0) : NULL;
    if (framed_list == NULL || ids == NULL || (pairs && chosen == NULL))
        goto fail;
    for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items); i++) {
        PyObject *item = PyList_GET_ITEM(items, i);
        const char *key = NULL;
        Py_ssize_t key_len = 0;
        PyObject *value;
        if (PyBytes_CheckExact(item)) {
            value = item;
        } else if (pairs && PyTuple_CheckExact(item) && PyTuple_GET_SIZE(item) == 2) {
            PyObject *key_obj = PyTuple_GET_ITEM(item, 0);
            value = PyTuple_GET_ITEM(item, 1);
            if (!PyBytes_CheckExact(value))
                break;
            if (key_obj != Py_None) {
                if (!PyBytes_CheckExact(key_obj))
                    break;
                key = PyBytes_AS_STRING(key_obj);
                key_len = PyBytes_GET_SIZE(key_obj);
            }
        } else {
            break;
        }
        Py_ssize_t partition =
            count == 1 ? 0 : (Py_ssize_t)(crc32_ieee((const uint8_t *)key, key_len) % (uint32_t)count);
        PyObject *head = heads[partition];
        int digits = snprintf(id + base_len + 1, 22, "%zd", i);
        Py_ssize_t id_len = base_len + 1 + digits;
        PyObject *framed = build_keyed_frame(PyBytes_AS_STRING(head), PyBytes_GET_SIZE(head), key,
                                             key_len, PyBytes_AS_STRING(value),
                                             PyBytes_GET_SIZE(value), id, id_len);
        if (append_new(framed_list, framed) < 0 || append_new(ids, ascii_str(id, id_len)) < 0 ||
            (pairs && append_new(chosen, PyLong_FromSsize_t(partition)) < 0))
            goto fail;
    }
    PyMem_Free(id);
    if (pairs)
        return Py_BuildValue("(NNN)", framed_list, ids, chosen);
    return Py_BuildValue("(NN)", framed_list, ids);
fail:
    PyMem_Free(id);
    Py_XDECREF(framed_list);
    Py_XDECREF(ids);
    Py_XDECREF(chosen);
    return NULL;
}

static PyObject *
frame_values(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "frame_values(head, values, base)");
        return NULL;
    }
    if (!PyBytes_CheckExact(args[0]) || !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "head must be bytes and values a list");
        return NULL;
    }
    return frame_run(args, 1, args[1], args[2], 0);
}

static PyObject *
frame_pairs(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 3) {
        PyErr_SetString(PyExc_TypeError, "frame_pairs(heads, items, base)");
        return NULL;
    }
    if (!PyList_CheckExact(args[0]) || PyList_GET_SIZE(args[0]) < 1 ||
        !PyList_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "heads must be a non-empty list and items a list");
        return NULL;
    }
    /* A tuple of the heads: the run reads them by index while it makes objects. */
    PyObject *heads = PyList_AsTuple(args[0]);
    if (heads == NULL)
        return NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(heads);
    PyObject *result = NULL;
    for (Py_ssize_t p = 0; p < count; p++) {
        if (!PyBytes_CheckExact(PyTuple_GET_ITEM(heads, p))) {
            PyErr_SetString(PyExc_TypeError, "heads must be bytes");
            goto done;
        }
    }
    result = frame_run(PySequence_Fast_ITEMS(heads), count, args[1], args[2], 1);
done:
    Py_DECREF(heads);
    return result;
}

/* ------------------------------------------------------------------ settling */

static PyObject *n_acquire, *n_release, *n_popleft;
LBS_INTERNAL PyObject *s_finished = NULL, *empty_tuple = NULL;

/* Resolve one ack's future; 1 taken, 0 left (not an error), -1 error. */
static int
settle_one(PyObject *ack, PyObject *pending, int owner, PyObject *ready)
{
    int rc = -1;
    PyObject *future = NULL, *partition = NULL;
    /* The caller checked that ack is an Ack (so an AckCore). */
    AckCoreObject *fields = (AckCoreObject *)ack;
    PyObject *cid = Py_XNewRef(fields->fields[A_CID]);
    if (cid == NULL) {
        PyErr_SetString(PyExc_AttributeError, "correlation_id");
        return -1;
    }
    PyObject *entry = PyDict_GetItemWithError(pending, cid);
    if (entry == NULL) {
        rc = PyErr_Occurred() ? -1 : owner; /* the owner ignores an ack nobody waits for */
        Py_DECREF(cid);
        return rc;
    }
    Py_INCREF(entry);
    PyObject *framed = entry_get(entry, E_FRAMED);
    if (framed == NULL)
        goto done;
    int other = answers_another_stream(fields->fields[A_STREAM], framed);
    Py_DECREF(framed);
    if (other != 0) {
        rc = other < 0 ? -1 : 0; /* another stream's ack: the Python path drops it */
        goto done;
    }
    future = entry_get(entry, E_FUTURE);
    if (future == NULL)
        goto done;
    FutureCoreObject *core = future_core(future);
    if (core == NULL)
        goto done;
    PyObject *callbacks = core->callbacks;
    int has_callbacks = callbacks != NULL &&
                        !(PyTuple_CheckExact(callbacks) && PyTuple_GET_SIZE(callbacks) == 0);
    int finished = future_finished(core);
    if (finished < 0)
        goto done;
    if (!owner && (has_callbacks || finished)) {
        rc = 0; /* the I/O thread leaves these to the owner */
        goto done;
    }
    /* Gone meanwhile is fine: the comparison above may run Python code (a finalizer) that
     * changed the table, or let another thread in. */
    if (owner && PyDict_DelItem(pending, cid) < 0) {
        if (!PyErr_ExceptionMatches(PyExc_KeyError))
            goto done;
        PyErr_Clear();
    }
    if (finished) {
        rc = 1; /* resolved meanwhile (timed out): the ack is dropped, as settle() does */
        goto done;
    }
    partition = entry_get(entry, E_PARTITION);
    if (partition == NULL)
        goto done;
    Py_XSETREF(fields->fields[A_PARTITION], Py_NewRef(partition));
    Py_XSETREF(core->result, Py_NewRef(ack));
    Py_XSETREF(core->state, Py_NewRef(s_finished));
    if ((core->waited || has_callbacks) && PyList_Append(ready, future) < 0)
        goto done;
    if (!owner) {
        /* Out of the pending table (if still the same entry). */
        PyObject *now = PyDict_GetItemWithError(pending, cid);
        if (now == NULL && PyErr_Occurred())
            goto done;
        if (now == entry && PyDict_DelItem(pending, cid) < 0)
            goto done;
    }
    rc = 1;
done:
    Py_XDECREF(partition);
    Py_XDECREF(future);
    Py_DECREF(entry);
    Py_DECREF(cid);
    return rc;
}

/* settle_acks(acks, pending, lock, owner) -> (count, ready): see the module comment. */
static PyObject *
settle_acks(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 4 || !PyList_CheckExact(args[0]) || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "settle_acks(acks: list, pending: dict, lock, owner: bool)");
        return NULL;
    }
    if (ack_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "setup() not called");
        return NULL;
    }
    PyObject *acks = args[0], *pending = args[1], *lock = args[2];
    int owner = PyObject_IsTrue(args[3]);
    if (owner < 0)
        return NULL;
    PyObject *ready = PyList_New(0);
    if (ready == NULL)
        return NULL;
    PyObject *r = PyObject_CallMethodNoArgs(lock, n_acquire);
    if (r == NULL) {
        Py_DECREF(ready);
        return NULL;
    }
    Py_DECREF(r);
    Py_ssize_t i = 0;
    int failed = 0;
    for (; i < PyList_GET_SIZE(acks); i++) {
        PyObject *ack = PyList_GET_ITEM(acks, i);
        if ((PyObject *)Py_TYPE(ack) != ack_type)
            break;
        Py_INCREF(ack);
        int rc = settle_one(ack, pending, owner, ready);
        Py_DECREF(ack);
        if (rc < 0)
            failed = 1;
        if (rc <= 0)
            break;
    }
    PyObject *type = NULL, *value = NULL, *tb = NULL;
    if (failed)
        PyErr_Fetch(&type, &value, &tb);
    r = PyObject_CallMethodNoArgs(lock, n_release);
    if (failed) {
        Py_XDECREF(r);
        PyErr_Restore(type, value, tb);
        Py_DECREF(ready);
        return NULL;
    }
    if (r == NULL) {
        Py_DECREF(ready);
        return NULL;
    }
    Py_DECREF(r);
    return Py_BuildValue("(nN)", i, ready);
}

/* run_callbacks(futures, start) -> (index, errors): see the top. */
/* Call one done-callback; an Exception it raises is appended to errors as (future,
 * exception) for the caller to log. 1 to go on, -1 to propagate (anything else). */
static int
call_callback(PyObject *callback, PyObject *future, PyObject *errors)
{
    PyObject *r = PyObject_CallOneArg(callback, future);
    if (r != NULL) {
        Py_DECREF(r);
        return 1;
    }
    /* SystemExit too: sys.exit() in a callback on a client's thread would only end that
     * thread (threading ignores it there), and with it publishing for every thread of
     * the process. KeyboardInterrupt (the main thread's) and the like propagate. */
    if (!PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_SystemExit))
        return -1;
    PyObject *type, *value, *tb;
    PyErr_Fetch(&type, &value, &tb);
    PyErr_NormalizeException(&type, &value, &tb);
    if (tb != NULL && value != NULL)
        PyException_SetTraceback(value, tb);
    PyObject *pair = PyTuple_Pack(2, future, value != NULL ? value : Py_None);
    Py_XDECREF(type);
    Py_XDECREF(value);
    Py_XDECREF(tb);
    int rc = pair == NULL || PyList_Append(errors, pair) < 0 ? -1 : 1;
    Py_XDECREF(pair);
    return rc;
}

static PyObject *
run_callbacks(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyList_CheckExact(args[0]) || !PyLong_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "run_callbacks(futures: list, start: int)");
        return NULL;
    }
    PyObject *futures = args[0];
    Py_ssize_t i = PyLong_AsSsize_t(args[1]);
    if (i < 0) {
        if (!PyErr_Occurred())
            PyErr_SetString(PyExc_ValueError, "run_callbacks: negative start");
        return NULL;
    }
    PyObject *errors = PyList_New(0);
    if (errors == NULL)
        return NULL;
    /* The list may change under us only through callbacks; re-read its size each time. */
    for (; i < PyList_GET_SIZE(futures); i++) {
        PyObject *future = Py_NewRef(PyList_GET_ITEM(futures, i));
        FutureCoreObject *core = future_core(future);
        if (core == NULL) {
            Py_DECREF(future);
            goto error;
        }
        if (core->waited) {
            Py_DECREF(future);
            break; /* the caller wakes its waiters, then runs its callbacks */
        }
        /* No callbacks: the empty tuple; one: the callable itself; more: a list. Taken
         * before any runs: add_done_callback never adds to a resolved future's. */
        PyObject *callbacks = core->callbacks != NULL ? core->callbacks : Py_NewRef(empty_tuple);
        core->callbacks = Py_NewRef(empty_tuple); /* the old reference is now ours */
        int any = !(PyTuple_CheckExact(callbacks) && PyTuple_GET_SIZE(callbacks) == 0);
        if (any) {
            if (PyList_CheckExact(callbacks)) {
                for (Py_ssize_t c = 0; any > 0 && c < PyList_GET_SIZE(callbacks); c++) {
                    PyObject *callback = Py_NewRef(PyList_GET_ITEM(callbacks, c));
                    any = call_callback(callback, future, errors);
                    Py_DECREF(callback);
                }
            }
            else {
                any = call_callback(callbacks, future, errors);
            }
        }
        Py_DECREF(callbacks);
        Py_DECREF(future);
        if (any < 0)
            goto error;
    }
    return Py_BuildValue("(nN)", i, errors);
error:
    Py_DECREF(errors);
    return NULL;
}

static PyObject *
setup(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyTuple_CheckExact(args[1]) ||
        PyTuple_GET_SIZE(args[1]) != 3) {
        PyErr_SetString(PyExc_TypeError, "setup(Ack, (LEADER, ALL, NONE))");
        return NULL;
    }
    if (!PyType_IsSubtype((PyTypeObject *)args[0], ack_core_type)) {
        PyErr_SetString(PyExc_TypeError, "setup: Ack must derive from AckCore");
        return NULL;
    }
    Py_XSETREF(ack_type, Py_NewRef(args[0]));
    Py_XSETREF(policies, Py_NewRef(args[1]));
    Py_RETURN_NONE;
}

/* ------------------------------------------------------------------ entries */


static PyObject *
setup_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyType_Check(args[0]) || !PyType_Check(args[1])) {
        PyErr_SetString(PyExc_TypeError, "setup_entries(Entry, PublishFuture)");
        return NULL;
    }
    PyTypeObject *type = (PyTypeObject *)args[0], *futures = (PyTypeObject *)args[1];
    if (!PyType_IsSubtype(type, entry_core_type) || !PyType_IsSubtype(futures, future_core_type)) {
        PyErr_SetString(PyExc_TypeError,
                        "setup_entries: Entry must derive from EntryCore, PublishFuture from "
                        "FutureCore");
        return NULL;
    }
    Py_XSETREF(entry_type, (PyTypeObject *)Py_NewRef(type));
    Py_XSETREF(future_type, (PyTypeObject *)Py_NewRef(futures));
    Py_RETURN_NONE;
}

/* A new Entry with a new future, its fields filled as EntryCore.__init__ would; NULL on
 * error. */
LBS_INTERNAL PyObject *
new_entry(PyObject *framed, PyObject *cid, PyObject *const *rest, PyObject **future_out)
{
    PyObject *future = PyObject_CallNoArgs((PyObject *)future_type);
    if (future == NULL)
        return NULL;
    PyObject *entry = entry_type->tp_alloc(entry_type, 0);
    if (entry == NULL) {
        Py_DECREF(future);
        return NULL;
    }
    PyObject *values[ENTRY_FIELDS] = {
        framed, cid, rest[0], rest[1], future, rest[2], rest[3], zero, zero_float, Py_None,
    };
    for (int f = 0; f < ENTRY_FIELDS; f++)
        ((EntryCoreObject *)entry)->fields[f] = Py_NewRef(values[f]);
    /* Out of the cyclic GC's sight: entries live in the publisher's tables for a whole
     * ack round trip, so the collector would walk and promote thousands of them (and
     * run full collections for them). No cycle can be left behind through one: only
     * those tables (kept alive by the running publisher) and its own locals refer to an
     * entry, so it is garbage, and freed by its reference count, once out of them. */
    PyObject_GC_UnTrack(entry);
    *future_out = future; /* the caller owns this reference */
    return entry;
}

/* make_entry(framed, correlation_id, partition, wants_ack, timeout, deadline) */
static PyObject *
make_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6) {
        PyErr_SetString(PyExc_TypeError,
                        "make_entry(framed, correlation_id, partition, wants_ack, timeout, "
                        "deadline)");
        return NULL;
    }
    if (entries_set_up() < 0)
        return NULL;
    PyObject *future = NULL;
    PyObject *entry = new_entry(args[0], args[1], args + 2, &future);
    Py_XDECREF(future);
    return entry;
}

/* pop_answered(queue, pending) -> bool: see the top. */
static PyObject *
pop_answered(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 2 || !PyDict_CheckExact(args[1])) {
        PyErr_SetString(PyExc_TypeError, "pop_answered(queue: deque, pending: dict)");
        return NULL;
    }
    if (entries_set_up() < 0)
        return NULL;
    PyObject *queue = args[0], *pending = args[1];
    for (;;) {
        Py_ssize_t size = PyObject_Length(queue);
        if (size < 0)
            return NULL;
        if (size == 0)
            Py_RETURN_FALSE;
        PyObject *head = PySequence_GetItem(queue, 0);
        if (head == NULL)
            return NULL;
        PyObject *cid = entry_get(head, E_CID);
        if (cid == NULL) {
            Py_DECREF(head);
            return NULL;
        }
        PyObject *found = PyDict_GetItemWithError(pending, cid);
        int still_pending = found == head;
        Py_DECREF(cid);
        Py_DECREF(head);
        if (found == NULL && PyErr_Occurred())
            return NULL;
        if (still_pending)
            Py_RETURN_TRUE;
        PyObject *popped = PyObject_CallMethodNoArgs(queue, n_popleft);
        if (popped == NULL)
            return NULL;
        Py_DECREF(popped);
    }
}

/* frame_entry(head, value, prefix, n, max_size, partition, wants_ack, timeout, deadline) */
static PyObject *
frame_entry(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 9) {
        PyErr_SetString(PyExc_TypeError,
                        "frame_entry(head, value, prefix, n, max_size, partition, wants_ack, "
                        "timeout, deadline)");
        return NULL;
    }
    if (entries_set_up() < 0)
        return NULL;
    Py_ssize_t max_size = PyLong_AsSsize_t(args[4]);
    if (max_size == -1 && PyErr_Occurred())
        return NULL;
    PyObject *framed, *cid;
    if (frame_with_id(args[0], args[1], args[2], args[3], &framed, &cid) < 0)
        return NULL;
    PyObject *entry = NULL, *future = NULL;
    if (PyBytes_GET_SIZE(framed) <= max_size)
        entry = new_entry(framed, cid, args + 5, &future);
    else
        entry = Py_NewRef(Py_None); /* too large: the caller raises */
    Py_XDECREF(future);
    Py_DECREF(framed);
    Py_DECREF(cid);
    return entry;
}

/* make_entries(framed, ids, partition, wants_ack, timeout, deadline): see the top. */
static PyObject *
make_entries(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
    if (nargs != 6 || !PyList_CheckExact(args[0]) || !PyList_CheckExact(args[1]) ||
        PyList_GET_SIZE(args[0]) != PyList_GET_SIZE(args[1])) {
        PyErr_SetString(PyExc_TypeError,
                        "make_entries(framed: list, ids: list of the same length, partition, "
                        "wants_ack, timeout, deadline)");
        return NULL;
    }
    if (entries_set_up() < 0)
        return NULL;
    Py_ssize_t n = PyList_GET_SIZE(args[0]);
    /* A list of partitions: one per request (a keyed batch that ByKey spread). */
    PyObject *partitions = PyList_CheckExact(args[2]) ? args[2] : NULL;
    if (partitions != NULL && PyList_GET_SIZE(partitions) != n) {
        PyErr_SetString(PyExc_TypeError, "make_entries: one partition per request");
        return NULL;
    }
    PyObject *rest[4] = {args[2], args[3], args[4], args[5]};
    PyObject *entries = PyList_New(n);
    PyObject *futures = entries == NULL ? NULL : PyList_New(n);
    if (futures == NULL) {
        Py_XDECREF(entries);
        return NULL;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *future = NULL;
        if (partitions != NULL)
            rest[0] = PyList_GET_ITEM(partitions, i);
        PyObject *entry =
            new_entry(PyList_GET_ITEM(args[0], i), PyList_GET_ITEM(args[1], i), rest, &future);
        if (entry == NULL)
            goto error;
        PyList_SET_ITEM(entries, i, entry);
        PyList_SET_ITEM(futures, i, future);
    }
    return Py_BuildValue("(NN)", entries, futures);
error:
    Py_DECREF(entries);
    Py_DECREF(futures);
    return NULL;
}

static PyMethodDef methods[] = {
    {"frame_value", (PyCFunction)(void (*)(void))frame_value, METH_FASTCALL, NULL},
    {"frame_id", (PyCFunction)(void (*)(void))frame_id, METH_FASTCALL, NULL},
    {"decode_ack", (PyCFunction)decode_ack, METH_O, NULL},
    {"frame_values", (PyCFunction)(void (*)(void))frame_values, METH_FASTCALL, NULL},
    {"frame_pairs", (PyCFunction)(void (*)(void))frame_pairs, METH_FASTCALL, NULL},
    {"scan_acks", (PyCFunction)(void (*)(void))scan_acks, METH_FASTCALL, NULL},
    {"answers_another_stream", (PyCFunction)(void (*)(void))answers_another_stream_fn,
     METH_FASTCALL, NULL},
    {"settle_acks", (PyCFunction)(void (*)(void))settle_acks, METH_FASTCALL, NULL},
    {"setup", (PyCFunction)(void (*)(void))setup, METH_FASTCALL, NULL},
    {"send_held", (PyCFunction)(void (*)(void))send_held, METH_FASTCALL, NULL},
    {"setup_entries", (PyCFunction)(void (*)(void))setup_entries, METH_FASTCALL, NULL},
    {"make_entries", (PyCFunction)(void (*)(void))make_entries, METH_FASTCALL, NULL},
    {"make_entry", (PyCFunction)(void (*)(void))make_entry, METH_FASTCALL, NULL},
    {"frame_entry", (PyCFunction)(void (*)(void))frame_entry, METH_FASTCALL, NULL},
    {"pop_answered", (PyCFunction)(void (*)(void))pop_answered, METH_FASTCALL, NULL},
    {"run_callbacks", (PyCFunction)(void (*)(void))run_callbacks, METH_FASTCALL, NULL},
    {"recv_held", (PyCFunction)(void (*)(void))recv_held, METH_FASTCALL, NULL},
    {"setup_submit", (PyCFunction)(void (*)(void))setup_submit, METH_FASTCALL, NULL},
    {"submit_plain", (PyCFunction)(void (*)(void))submit_plain, METH_FASTCALL, NULL},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups", "C speedups of the publish hot path.", -1, methods,
};

#define INTERN(var, text)                                                                      \
    do {                                                                                       \
        var = PyUnicode_InternFromString(text);                                                \
        if (var == NULL)                                                                       \
            return NULL;                                                                       \
    } while (0)

PyMODINIT_FUNC
PyInit__speedups(void)
{
    init_crc32_table();
    INTERN(n_acquire, "acquire");
    INTERN(n_release, "release");
    INTERN(n_popleft, "popleft");
    INTERN(s_finished, "FINISHED");
    empty_str = PyUnicode_FromStringAndSize("", 0);
    minus_one = PyLong_FromLong(-1);
    zero = PyLong_FromLong(0);
    zero_float = PyFloat_FromDouble(0.0);
    empty_tuple = PyTuple_New(0);
    if (empty_str == NULL || minus_one == NULL || zero == NULL || zero_float == NULL ||
        empty_tuple == NULL)
        return NULL;
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    if (add_pending_core(m) < 0 || add_outbound_queue(m) < 0 || add_future_core(m) < 0 ||
        add_entry_core(m) < 0 || add_ack_core(m) < 0 || add_gate(m) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
