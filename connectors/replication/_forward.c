/* The replicator's per-record hot path in C: stored records -> SEND_BATCH_MESSAGE entries.
 *
 * ``forward_plain`` is ``connectors.replication.forwarding.RecordForwarder.forward_each`` for pulls whose records
 * are all plain: well formed, of the pulled topic and queue, uncompressed, IPv4 hosts, without a
 * loop-guard chain, without an empty UNIQ_KEY, and whose properties stay within the limit once
 * stamped. For any other pull it returns None and the Python code handles it (and names what is wrong):
 * this file decides nothing the Python path does not, and the property tests hold the two equal.
 *
 * Rules (as forward_each): entries whose key is a dropped name are cut out (the regex of
 * ``dropped_entries_pattern``: an entry is dropped when it starts with NAME followed by \x01); a record
 * without UNIQ_KEY gets its offset message id (STOREHOST ip + port + PHYSICALOFFSET, 32 upper-case hex
 * digits); the suffix (the chain entry, or nothing) is appended, after a \x02 unless the properties are
 * empty or already end with one; then, when ``position`` is not empty (the position entry up to the offset:
 * ``ROCKETMQ_REPLICATOR_POSITION\x01<cluster>/<topic>/<broker>/<queue id>/``, see source_position.py), it,
 * the record's queue offset in decimal and a \x02, by the same rule.
 *
 * The property format (name \x01 value \x02, the last UNIQ_KEY winning) is owned by
 * broker_store/protocol/properties.py; the keys and separators below mirror it (``property_key``,
 * ``last_value_start``, ``append_properties``), and the property tests hold this file to it.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* The stored-record layout is owned by broker_store/protocol/message.py (STORED_FIELDS): these are its
 * STORED_OFFSETS, STORED_HEADER_SIZE and MAGIC_V1, the batch entry header is its BATCH_HEADER, and the flags
 * protocol/codes.py's MSG_FLAG_*. tests/unit/test_connectors_forwarding.py compares every #define below with
 * the Python owner, so a layout change there fails the test until this file follows. */
#define HEADER_SIZE 88
#define MAGIC_V1 (-626843481)
#define OFF_TOTALSIZE 0
#define OFF_MAGICCODE 4
#define OFF_QUEUEID 12
#define OFF_FLAG 16
#define OFF_QUEUEOFFSET 20
#define OFF_PHYSICALOFFSET 28
#define OFF_SYSFLAG 36
#define OFF_BORNTIMESTAMP 40
#define OFF_STORETIMESTAMP 56
#define OFF_STOREHOST 64
#define OFF_STOREHOST_PORT 68
#define OFF_BODYLEN 84
#define ENTRY_HEADER 20
#define FLAG_UNUSUAL (0x1 | 0x10 | 0x20) /* compressed, born host v6, store host v6 */

static int32_t be32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | (uint32_t)p[3]);
}

static int64_t be64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)be32(p) << 32) | (uint64_t)(uint32_t)be32(p + 4));
}

static void put32(unsigned char *p, int32_t v) {
    uint32_t u = (uint32_t)v;
    p[0] = (unsigned char)(u >> 24); p[1] = (unsigned char)(u >> 16); p[2] = (unsigned char)(u >> 8);
    p[3] = (unsigned char)u;
}

/* Last occurrence of needle in hay, or -1. */
static Py_ssize_t rfind(const unsigned char *hay, Py_ssize_t n, const char *needle, Py_ssize_t m) {
    for (Py_ssize_t i = n - m; i >= 0; i--) {
        if (hay[i] == (unsigned char)needle[0] && memcmp(hay + i, needle, (size_t)m) == 0) {
            return i;
        }
    }
    return -1;
}

/* v in decimal ASCII at p, as Python's str(int); returns the length (at most 20). */
static Py_ssize_t put_decimal(unsigned char *p, int64_t v) {
    unsigned char tmp[20];
    Py_ssize_t n = 0, k = 0;
    uint64_t u = v < 0 ? (uint64_t)0 - (uint64_t)v : (uint64_t)v;
    do { tmp[n++] = (unsigned char)('0' + u % 10); u /= 10; } while (u);
    if (v < 0) p[k++] = '-';
    while (n) p[k++] = tmp[--n];
    return k;
}

static int contains(const unsigned char *hay, Py_ssize_t n, const char *needle, Py_ssize_t m) {
    for (Py_ssize_t i = 0; i + m <= n; i++) {
        if (hay[i] == (unsigned char)needle[0] && memcmp(hay + i, needle, (size_t)m) == 0) {
            return 1;
        }
    }
    return 0;
}

static const char UNIQ_LATER[] = "\x02UNIQ_KEY\x01";
static const char UNIQ_FIRST[] = "UNIQ_KEY\x01";
static const char CHAIN_KEY[] = "ROCKETMQ_REPLICATOR_SOURCE\x01";
static const char HEX[] = "0123456789ABCDEF";

typedef struct {
    const char *name;
    Py_ssize_t len;
} Name;

/* Is the entry [p, p + len) one whose key is a dropped name? */
static int dropped_entry(const unsigned char *p, Py_ssize_t len, const Name *names, Py_ssize_t count) {
    for (Py_ssize_t k = 0; k < count; k++) {
        Py_ssize_t m = names[k].len;
        if (len > m && p[m] == 1 && memcmp(p, names[k].name, (size_t)m) == 0) {
            return 1;
        }
    }
    return 0;
}

static int append_long(PyObject *list, long long v) {
    PyObject *o = PyLong_FromLongLong(v);
    if (o == NULL) return -1;
    int rc = PyList_Append(list, o);
    Py_DECREF(o);
    return rc;
}

/* forward_plain(buf, topic, queue_id, first, stop, dropped, suffix, max_props, position)
 *   -> (entries, offsets, sizes, borns, starts, next_offset, oldest_store_ms) or None */
static PyObject *forward_plain(PyObject *self, PyObject *args) {
    Py_buffer buf, topic, suffix, position;
    int queue_id, max_props;
    long long first, stop;
    PyObject *dropped;
    if (!PyArg_ParseTuple(args, "y*y*iLLO!y*iy*", &buf, &topic, &queue_id, &first, &stop, &PyTuple_Type, &dropped,
                          &suffix, &max_props, &position)) {
        return NULL;
    }
    PyObject *result = NULL, *entries = NULL, *offsets = NULL, *sizes = NULL, *borns = NULL, *starts = NULL;
    unsigned char *work = NULL;
    Py_ssize_t count = PyTuple_GET_SIZE(dropped);
    Name *names = PyMem_Calloc((size_t)(count ? count : 1), sizeof(Name));
    if (names == NULL) { PyErr_NoMemory(); goto done; }
    for (Py_ssize_t k = 0; k < count; k++) {
        PyObject *item = PyTuple_GET_ITEM(dropped, k);
        if (!PyBytes_Check(item)) { PyErr_SetString(PyExc_TypeError, "dropped names must be bytes"); goto done; }
        names[k].name = PyBytes_AS_STRING(item);
        names[k].len = PyBytes_GET_SIZE(item);
    }
    entries = PyList_New(0); offsets = PyList_New(0); sizes = PyList_New(0); borns = PyList_New(0);
    starts = PyList_New(0);
    if (!entries || !offsets || !sizes || !borns || !starts) goto done;
    /* properties grow by at most the UNIQ_KEY entry (10 + 32 + 1), two separators, the suffix and the position
     * entry (its prefix, up to 20 digits and a separator) */
    work = PyMem_Malloc((size_t)(65536 + 96 + suffix.len + position.len));
    if (work == NULL) { PyErr_NoMemory(); goto done; }

    const unsigned char *b = buf.buf;
    const unsigned char *tp = topic.buf;
    const unsigned char *sx = suffix.buf;
    const unsigned char *px = position.buf;
    Py_ssize_t n = buf.len, tlen = topic.len, pos = 0;
    long long next_offset = -1, oldest = 0;
    int have_oldest = 0;
    while (pos < n) {
        if (n - pos < HEADER_SIZE) goto plain_no;
        const unsigned char *r = b + pos;
        int32_t total = be32(r + OFF_TOTALSIZE), magic = be32(r + OFF_MAGICCODE), qid = be32(r + OFF_QUEUEID);
        int32_t flag = be32(r + OFF_FLAG);
        int64_t offset = be64(r + OFF_QUEUEOFFSET), phys = be64(r + OFF_PHYSICALOFFSET);
        int32_t sys_flag = be32(r + OFF_SYSFLAG);
        int64_t born = be64(r + OFF_BORNTIMESTAMP), store = be64(r + OFF_STORETIMESTAMP);
        int32_t body_len = be32(r + OFF_BODYLEN);
        Py_ssize_t end = pos + total, p = pos + HEADER_SIZE, t = p + body_len, q = t + 1 + tlen;
        if (magic != MAGIC_V1 || total < HEADER_SIZE + 3 + tlen || end > n || body_len < 0 || q + 2 > end
            || b[t] != (unsigned char)tlen || q + 2 + ((b[q] << 8) | b[q + 1]) != end) goto plain_no;
        if (qid != queue_id || memcmp(b + t + 1, tp, (size_t)tlen) != 0) goto plain_no;
        if (offset < first || offset >= stop) { pos = end; continue; }
        if (offset >= next_offset) next_offset = offset + 1;
        if (!have_oldest || store < oldest) { oldest = store; have_oldest = 1; }
        const unsigned char *props = b + q + 2;
        Py_ssize_t plen_in = end - (q + 2);
        Py_ssize_t uniq = rfind(props, plen_in, UNIQ_LATER, 10);
        if (uniq >= 0) uniq += 10;
        else if (plen_in >= 9 && memcmp(props, UNIQ_FIRST, 9) == 0) uniq = 9;
        if ((sys_flag & FLAG_UNUSUAL) || contains(props, plen_in, CHAIN_KEY, 27)
            || (uniq >= 0 && (uniq == plen_in || props[uniq] == 2))) goto plain_no;
        /* kept entries, joined by \x02 */
        Py_ssize_t w = 0, s = 0;
        int kept_any = 0;
        for (Py_ssize_t i = 0; i <= plen_in; i++) {
            if (i == plen_in || props[i] == 2) {
                if (!dropped_entry(props + s, i - s, names, count)) {
                    if (kept_any) work[w++] = 2;
                    memcpy(work + w, props + s, (size_t)(i - s));
                    w += i - s;
                    kept_any = 1;
                }
                s = i + 1;
            }
        }
        if (uniq < 0) {
            if (w > 0 && work[w - 1] != 2) work[w++] = 2;
            memcpy(work + w, UNIQ_FIRST, 9);
            w += 9;
            const unsigned char *ip = r + OFF_STOREHOST;
            unsigned char id[16];
            memcpy(id, ip, 4);
            put32(id + 4, be32(r + OFF_STOREHOST_PORT));
            put32(id + 8, (int32_t)(phys >> 32));
            put32(id + 12, (int32_t)phys);
            for (int k = 0; k < 16; k++) { work[w++] = HEX[id[k] >> 4]; work[w++] = HEX[id[k] & 15]; }
            work[w++] = 2;
        }
        if (suffix.len) {
            if (w > 0 && work[w - 1] != 2) work[w++] = 2;
            memcpy(work + w, sx, (size_t)suffix.len);
            w += suffix.len;
        }
        if (position.len) {
            if (w > 0 && work[w - 1] != 2) work[w++] = 2;
            memcpy(work + w, px, (size_t)position.len);
            w += position.len;
            w += put_decimal(work + w, offset);
            work[w++] = 2;
        }
        if (w > max_props) goto plain_no;
        PyObject *entry = PyBytes_FromStringAndSize(NULL, ENTRY_HEADER + body_len + 2 + w);
        if (entry == NULL) goto done;
        unsigned char *e = (unsigned char *)PyBytes_AS_STRING(entry);
        put32(e, (int32_t)(ENTRY_HEADER + 2 + body_len + w));
        put32(e + 4, 0);
        put32(e + 8, 0);
        put32(e + 12, flag);
        put32(e + 16, body_len);
        memcpy(e + ENTRY_HEADER, b + p, (size_t)body_len);
        e[ENTRY_HEADER + body_len] = (unsigned char)(w >> 8);
        e[ENTRY_HEADER + body_len + 1] = (unsigned char)w;
        memcpy(e + ENTRY_HEADER + body_len + 2, work, (size_t)w);
        int rc = PyList_Append(entries, entry);
        Py_DECREF(entry);
        if (rc < 0 || append_long(offsets, offset) < 0 || append_long(sizes, body_len) < 0
            || append_long(borns, born) < 0 || append_long(starts, pos) < 0) goto done;
        pos = end;
    }
    {
        PyObject *old = have_oldest ? PyLong_FromLongLong(oldest) : Py_NewRef(Py_None);
        if (old == NULL) goto done;
        result = Py_BuildValue("(OOOOOLN)", entries, offsets, sizes, borns, starts, next_offset, old);
    }
    goto done;
plain_no:
    result = Py_NewRef(Py_None);
done:
    PyMem_Free(names);
    PyMem_Free(work);
    Py_XDECREF(entries); Py_XDECREF(offsets); Py_XDECREF(sizes); Py_XDECREF(borns); Py_XDECREF(starts);
    PyBuffer_Release(&buf); PyBuffer_Release(&topic); PyBuffer_Release(&suffix); PyBuffer_Release(&position);
    return result;
}

static PyMethodDef methods[] = {
    {"forward_plain", forward_plain, METH_VARARGS,
     "forward_plain(buf, topic, queue_id, first, stop, dropped, suffix, max_props, position) -> tuple | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, .m_name = "_forward", .m_doc = NULL, .m_size = -1, .m_methods = methods,
};

PyMODINIT_FUNC PyInit__forward(void) { return PyModule_Create(&module); }
