package strata.judge;

import com.fasterxml.jackson.core.JsonGenerator;
import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;
import java.io.File;
import java.io.PrintStream;
import java.math.BigDecimal;
import java.nio.file.Files;
import java.nio.file.Path;
import java.time.LocalDate;
import java.time.LocalDateTime;
import java.time.LocalTime;
import java.time.format.DateTimeFormatter;
import java.util.ArrayList;
import java.util.Base64;
import java.util.Comparator;
import java.util.HashMap;
import java.util.Iterator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.TreeSet;
import java.util.UUID;
import java.util.stream.Stream;
import org.apache.paimon.AppendOnlyFileStore;
import org.apache.paimon.CoreOptions;
import org.apache.paimon.append.AppendCompactCoordinator;
import org.apache.paimon.append.AppendCompactTask;
import org.apache.paimon.catalog.Catalog;
import org.apache.paimon.catalog.CatalogContext;
import org.apache.paimon.catalog.CatalogFactory;
import org.apache.paimon.catalog.Identifier;
import org.apache.paimon.data.BinaryRow;
import org.apache.paimon.data.BinaryString;
import org.apache.paimon.data.Decimal;
import org.apache.paimon.data.GenericArray;
import org.apache.paimon.data.GenericMap;
import org.apache.paimon.data.GenericRow;
import org.apache.paimon.data.InternalArray;
import org.apache.paimon.data.InternalMap;
import org.apache.paimon.data.InternalRow;
import org.apache.paimon.data.Timestamp;
import org.apache.paimon.disk.IOManager;
import org.apache.paimon.index.HashBucketAssigner;
import org.apache.paimon.options.Options;
import org.apache.paimon.reader.RecordReader;
import org.apache.paimon.operation.BaseAppendFileStoreWrite;
import org.apache.paimon.schema.Schema;
import org.apache.paimon.schema.SchemaChange;
import org.apache.paimon.table.BucketMode;
import org.apache.paimon.table.FileStoreTable;
import org.apache.paimon.table.Table;
import org.apache.paimon.table.sink.BatchTableCommit;
import org.apache.paimon.table.sink.BatchTableWrite;
import org.apache.paimon.table.sink.BatchWriteBuilder;
import org.apache.paimon.table.sink.CommitMessage;
import org.apache.paimon.table.sink.RowKeyExtractor;
import org.apache.paimon.table.source.DataSplit;
import org.apache.paimon.table.source.ReadBuilder;
import org.apache.paimon.table.source.Split;
import org.apache.paimon.types.ArrayType;
import org.apache.paimon.types.DataField;
import org.apache.paimon.types.DataType;
import org.apache.paimon.types.DataTypeJsonParser;
import org.apache.paimon.types.DataTypes;
import org.apache.paimon.types.DecimalType;
import org.apache.paimon.types.LocalZonedTimestampType;
import org.apache.paimon.types.MapType;
import org.apache.paimon.types.MultisetType;
import org.apache.paimon.types.RowKind;
import org.apache.paimon.types.RowType;
import org.apache.paimon.types.TimestampType;

/**
 * Apache Paimon's Java library as a judge of Strata's tables: it reads, writes and compacts
 * filesystem-catalog tables and answers in JSON on stdout (a failure: one line on stderr, exit 1).
 *
 * <pre>
 *   read      WAREHOUSE DB.TABLE [--snapshot N] [--option KEY=VALUE]... [--row-kind]   (DB.TABLE$ro too)
 *   read-many WAREHOUSE JOBS.json     jobs: [{"table": "db.t", "snapshot": 3, "options": {...},
 *                                     "row_kind": true}, ...]
 *   (--row-kind / "row_kind": each row also carries "_kind": +I, -U, +U or -D)
 *   write     WAREHOUSE SPEC.json [--keep-going]   one table spec or a list of them (see {@link #write});
 *                                   --keep-going: a table that fails is {"error": ...}, the rest go on
 *   compact   WAREHOUSE DB.TABLE... [--full]          one COMPACT commit per table
 *   selftest  WAREHOUSE
 *   session   WAREHOUSE   one JSON request a line on stdin, one JSON answer a line on stdout (see
 *                         {@link #session}): many commands in one JVM
 * </pre>
 *
 * WAREHOUSE is a warehouse path (a filesystem catalog), or {@code @FILE.json}: a JSON object of
 * catalog options, e.g. Paimon's REST catalog {"metastore": "rest", "uri": ..., "token": ...,
 * "warehouse": ..., "s3.endpoint": ...}.
 *
 * Values in JSON, both ways: integers and floating point as numbers (FLOAT widened exactly to a
 * double), BOOLEAN as true/false, DECIMAL as a plain string with the column's scale ("-1.50"),
 * CHAR/VARCHAR as strings, BINARY/VARBINARY as base64, DATE as "yyyy-MM-dd", TIME as
 * "HH:mm:ss.SSS", TIMESTAMP as "yyyy-MM-ddTHH:mm:ss.SSSSSS" (9 digits when the precision is above 6)
 * and TIMESTAMP_LTZ the same in UTC, ARRAY as a list, MAP as a list of [key, value] pairs,
 * MULTISET as a list of [element, count] pairs, ROW as an object.
 */
public final class PaimonJudge {

    private static final ObjectMapper JSON = new ObjectMapper()
            .disable(JsonGenerator.Feature.AUTO_CLOSE_TARGET)
            .disable(com.fasterxml.jackson.core.json.JsonWriteFeature.WRITE_NAN_AS_STRINGS.mappedFeature())
            .enable(com.fasterxml.jackson.core.JsonParser.Feature.ALLOW_NON_NUMERIC_NUMBERS);
    private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
    private static final DateTimeFormatter MICROS = DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSSSSS");
    private static final DateTimeFormatter NANOS = DateTimeFormatter.ofPattern("uuuu-MM-dd'T'HH:mm:ss.SSSSSSSSS");
    private static final DateTimeFormatter MILLIS_OF_DAY = DateTimeFormatter.ofPattern("HH:mm:ss.SSS");

    private PaimonJudge() {}

    public static void main(String[] args) {
        // Only our answer goes to stdout: anything a library prints there is moved to stderr.
        PrintStream answer = System.out;
        SESSION_OUT = answer;
        System.setOut(System.err);
        int code = 0;
        try {
            JsonNode result = run(args);
            answer.println(JSON.writeValueAsString(result));
            answer.flush();
        } catch (Throwable t) {
            System.err.println("paimon-judge: " + describe(t));
            if (System.getenv("PAIMON_JUDGE_TRACE") != null) {
                t.printStackTrace();
            }
            code = 1;
        }
        // Paimon may leave executor threads behind; the answer is complete, so leave at once.
        System.exit(code);
    }

    private static JsonNode run(String[] args) throws Exception {
        String command = args.length > 0 ? args[0] : "";
        if (args.length < (command.equals("selftest") || command.equals("session") ? 2 : 3)) {
            throw new IllegalArgumentException("usage: read|read-many|write|compact WAREHOUSE ARG "
                    + "[--snapshot N] [--option K=V] [--full], or selftest|session WAREHOUSE");
        }
        Path scratch = Files.createTempDirectory("paimon-judge-");
        try (Catalog catalog = catalog(args[1])) {
            IOManager io = IOManager.create(scratch.toString());
            try {
                switch (command) {
                    case "read":
                        return read(catalog, args[2], flagValue(args, "--snapshot"), flagOptions(args),
                                List.of(args).contains("--row-kind"));
                    case "read-many":
                        return readMany(catalog, JSON.readTree(new File(args[2])));
                    case "write":
                        return write(catalog, io, JSON.readTree(new File(args[2])),
                                List.of(args).contains("--keep-going"));
                    case "compact":
                        return compact(catalog, io, positional(args), List.of(args).contains("--full"));
                    case "selftest":
                        return selftest(catalog, io);
                    case "session":
                        return session(catalog, io);
                    default:
                        throw new IllegalArgumentException("unknown command " + command);
                }
            } finally {
                io.close();
            }
        } finally {
            deleteTree(scratch);
        }
    }

    private static Catalog catalog(String warehouse) throws Exception {
        Map<String, String> options = new HashMap<>();
        if (warehouse.startsWith("@")) {
            JSON.readTree(new File(warehouse.substring(1))).fields()
                    .forEachRemaining(e -> options.put(e.getKey(), e.getValue().asText()));
        } else {
            options.put("warehouse", warehouse);
        }
        // One JVM may write a table and then read it: never serve a stale cached table.
        options.put("cache-enabled", "false");
        return CatalogFactory.createCatalog(CatalogContext.create(Options.fromMap(options)));
    }

    // -- read ----------------------------------------------------------------------------------

    private static JsonNode readMany(Catalog catalog, JsonNode jobs) {
        ArrayNode results = NODES.arrayNode();
        for (JsonNode job : jobs) {
            try {
                Map<String, String> options = new LinkedHashMap<>();
                job.path("options").fields().forEachRemaining(e -> options.put(e.getKey(), e.getValue().asText()));
                String snapshot = job.hasNonNull("snapshot") ? job.get("snapshot").asText() : null;
                results.add(read(catalog, job.get("table").asText(), snapshot, options,
                        job.path("row_kind").asBoolean(false)));
            } catch (Throwable t) { // per job, so one failure does not hide the others
                results.add(NODES.objectNode().put("table", job.path("table").asText()).put("error", describe(t)));
            }
        }
        return results;
    }

    private static ObjectNode read(
            Catalog catalog, String name, String snapshot, Map<String, String> options, boolean rowKind)
            throws Exception {
        Table table = catalog.getTable(Identifier.fromString(name));
        Map<String, String> dynamic = new HashMap<>(options);
        if (snapshot != null) {
            dynamic.put("scan.snapshot-id", snapshot);
        }
        if (!dynamic.isEmpty()) {
            table = table.copy(dynamic);
        }
        ReadBuilder builder = table.newReadBuilder();
        List<Split> splits = builder.newScan().plan().splits();
        RowType type = builder.readType();
        List<InternalRow.FieldGetter> getters = new ArrayList<>();
        for (int i = 0; i < type.getFieldCount(); i++) {
            getters.add(InternalRow.createFieldGetter(type.getTypeAt(i), i));
        }
        ArrayNode rows = NODES.arrayNode();
        try (RecordReader<InternalRow> reader = builder.newRead().createReader(splits)) {
            reader.forEachRemaining(row -> {
                ObjectNode out = rows.addObject();
                for (int i = 0; i < getters.size(); i++) {
                    DataField field = type.getFields().get(i);
                    out.set(field.name(), toJson(getters.get(i).getFieldOrNull(row), field.type()));
                }
                if (rowKind) {
                    out.put("_kind", row.getRowKind().shortString());
                }
            });
        }
        ObjectNode result = NODES.objectNode();
        result.put("table", name);
        result.put("splits", splits.size());
        ArrayNode fields = result.putArray("fields");
        for (DataField field : type.getFields()) {
            fields.addObject().put("name", field.name()).put("type", field.type().toString());
        }
        result.set("rows", rows);
        return result;
    }

    static JsonNode toJson(Object value, DataType type) {
        if (value == null) {
            return NODES.nullNode();
        }
        switch (type.getTypeRoot()) {
            case BOOLEAN:
                return NODES.booleanNode((Boolean) value);
            case TINYINT:
                return NODES.numberNode((Byte) value);
            case SMALLINT:
                return NODES.numberNode((Short) value);
            case INTEGER:
                return NODES.numberNode((Integer) value);
            case BIGINT:
                return NODES.numberNode((Long) value);
            case FLOAT:
                return NODES.numberNode(((Float) value).doubleValue());
            case DOUBLE:
                return NODES.numberNode((Double) value);
            case DECIMAL:
                return NODES.textNode(((Decimal) value).toBigDecimal().toPlainString());
            case CHAR:
            case VARCHAR:
                return NODES.textNode(value.toString());
            case BINARY:
            case VARBINARY:
                return NODES.textNode(Base64.getEncoder().encodeToString((byte[]) value));
            case DATE:
                return NODES.textNode(LocalDate.ofEpochDay((Integer) value).toString());
            case TIME_WITHOUT_TIME_ZONE:
                return NODES.textNode(LocalTime.ofNanoOfDay((Integer) value * 1_000_000L).format(MILLIS_OF_DAY));
            case TIMESTAMP_WITHOUT_TIME_ZONE:
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE:
                DateTimeFormatter format = timestampPrecision(type) > 6 ? NANOS : MICROS;
                return NODES.textNode(((Timestamp) value).toLocalDateTime().format(format));
            case ARRAY:
                return arrayToJson((InternalArray) value, ((ArrayType) type).getElementType());
            case MAP: {
                MapType map = (MapType) type;
                return pairsToJson((InternalMap) value, map.getKeyType(), map.getValueType());
            }
            case MULTISET:
                return pairsToJson((InternalMap) value, ((MultisetType) type).getElementType(), DataTypes.INT());
            case ROW: {
                RowType row = (RowType) type;
                ObjectNode out = NODES.objectNode();
                for (int i = 0; i < row.getFieldCount(); i++) {
                    Object field = InternalRow.createFieldGetter(row.getTypeAt(i), i).getFieldOrNull((InternalRow) value);
                    out.set(row.getFields().get(i).name(), toJson(field, row.getTypeAt(i)));
                }
                return out;
            }
            default:
                return NODES.textNode(value.toString());
        }
    }

    private static int timestampPrecision(DataType type) {
        return type instanceof TimestampType
                ? ((TimestampType) type).getPrecision()
                : ((LocalZonedTimestampType) type).getPrecision();
    }

    private static ArrayNode arrayToJson(InternalArray array, DataType elementType) {
        InternalArray.ElementGetter getter = InternalArray.createElementGetter(elementType);
        ArrayNode out = NODES.arrayNode();
        for (int i = 0; i < array.size(); i++) {
            out.add(toJson(getter.getElementOrNull(array, i), elementType));
        }
        return out;
    }

    private static ArrayNode pairsToJson(InternalMap map, DataType keyType, DataType valueType) {
        ArrayNode keys = arrayToJson(map.keyArray(), keyType);
        ArrayNode values = arrayToJson(map.valueArray(), valueType);
        ArrayNode out = NODES.arrayNode();
        for (int i = 0; i < keys.size(); i++) {
            out.addArray().add(keys.get(i)).add(values.get(i));
        }
        return out;
    }

    // -- write ---------------------------------------------------------------------------------

    /**
     * Creates each table of the spec (unless it has no "fields": then the table exists) and runs
     * its steps in order, one snapshot per step. A spec:
     * {"table": "db.t", "fields": [{"name": "id", "type": "BIGINT NOT NULL"}, ...],
     * "primary_keys": [...], "partition_keys": [...], "options": {...}, "commits": [step, ...]}
     * with steps {"rows": [{"_kind": "+I", "id": 1, ...}, ...]} ("_kind" defaults to +I; missing
     * columns are null), optionally with "overwrite": {partition spec}; {"compact": true, "full":
     * true}; {"alter": [{"add_column": "c", "type": "INT"}, {"rename_column": "a", "to": "b"},
     * {"drop_column": "c"}, {"update_column_type": "c", "type": "BIGINT"}, {"set_option": "k",
     * "value": "v"}]}.
     */
    private static JsonNode write(Catalog catalog, IOManager io, JsonNode spec, boolean keepGoing) throws Exception {
        ArrayNode results = NODES.arrayNode();
        for (JsonNode one : spec.isArray() ? spec : NODES.arrayNode().add(spec)) {
            try {
                results.add(writeTable(catalog, io, one));
            } catch (Exception e) {
                if (!keepGoing) {
                    throw e;
                }
                results.addObject().put("table", one.path("table").asText()).put("error", describe(e));
            }
        }
        return results;
    }

    private static ObjectNode writeTable(Catalog catalog, IOManager io, JsonNode one) throws Exception {
        Identifier id = Identifier.fromString(one.get("table").asText());
        if (one.has("fields")) { // without fields: write into the existing table
            catalog.createDatabase(id.getDatabaseName(), true);
            Schema.Builder schema = Schema.newBuilder();
            for (JsonNode field : one.get("fields")) {
                schema.column(field.get("name").asText(), parseType(field.get("type").asText()));
            }
            schema.primaryKey(strings(one.path("primary_keys")));
            schema.partitionKeys(strings(one.path("partition_keys")));
            one.path("options").fields().forEachRemaining(e -> schema.option(e.getKey(), e.getValue().asText()));
            catalog.createTable(id, schema.build(), false);
        }
        for (JsonNode step : one.path("commits")) {
            try {
                if (step.has("alter")) {
                    catalog.alterTable(id, schemaChanges(step.get("alter")), false);
                } else if (step.has("create_tag") || step.has("create_branch") || step.has("fast_forward")) {
                    manageRefs(catalog.getTable(id), step);
                } else if (step.path("compact").asBoolean(false)) {
                    compactTable(catalog.getTable(id), io, step.path("full").asBoolean(false));
                } else {
                    writeRows(catalog.getTable(id), io, step);
                }
            } catch (Exception e) {
                String text = step.toString();
                throw new IllegalStateException(
                        id + ", step " + text.substring(0, Math.min(120, text.length())), e);
            }
        }
        ObjectNode result = NODES.objectNode().put("table", id.getFullName());
        catalog.getTable(id).latestSnapshot().ifPresent(s -> result.put("snapshot", s.id()));
        return result;
    }

    /**
     * Tags and branches through Paimon's Table API: {"create_tag": name}, {"create_branch": name,
     * "tag"?: from}, {"fast_forward": branch}.
     */
    private static void manageRefs(Table table, JsonNode step) {
        if (step.has("create_tag")) {
            table.createTag(step.get("create_tag").asText());
        } else if (step.has("create_branch")) {
            String branch = step.get("create_branch").asText();
            if (step.hasNonNull("tag")) {
                table.createBranch(branch, step.get("tag").asText());
            } else {
                table.createBranch(branch);
            }
        } else {
            table.fastForward(step.get("fast_forward").asText());
        }
    }

    private static void writeRows(Table table, IOManager io, JsonNode step) throws Exception {
        RowType type = table.rowType();
        BatchWriteBuilder builder = table.newBatchWriteBuilder();
        if (step.has("overwrite")) {
            Map<String, String> partition = new LinkedHashMap<>();
            step.get("overwrite").fields().forEachRemaining(e -> partition.put(e.getKey(), e.getValue().asText()));
            builder = builder.withOverwrite(partition);
        }
        try (BatchTableWrite write = builder.newWrite();
                BatchTableCommit commit = builder.newCommit()) {
            write.withIOManager(io);
            DynamicBuckets dynamic = DynamicBuckets.of(table);
            for (JsonNode row : step.get("rows")) {
                Object[] values = new Object[type.getFieldCount()];
                for (int i = 0; i < values.length; i++) {
                    DataField field = type.getFields().get(i);
                    values[i] = fromJson(row.get(field.name()), field.type());
                }
                Iterator<String> names = row.fieldNames();
                while (names.hasNext()) {
                    String name = names.next();
                    if (!name.equals("_kind") && !type.containsField(name)) {
                        throw new IllegalArgumentException("no column " + name + " in " + table.name());
                    }
                }
                GenericRow record = GenericRow.ofKind(RowKind.fromShortString(row.path("_kind").asText("+I")), values);
                if (dynamic != null) {
                    write.write(record, dynamic.bucket(record));
                } else {
                    write.write(record);
                }
            }
            commit.commit(write.prepareCommit());
        }
    }

    /**
     * Dynamic bucket mode (bucket = -1, primary key): the writer is told each row's bucket, which
     * Paimon's HashBucketAssigner (one assigner) takes from the table's hash index, as a Flink or
     * Spark job's assigner operator does.
     */
    private static final class DynamicBuckets {
        private final RowKeyExtractor keys;
        private final HashBucketAssigner assigner;

        private DynamicBuckets(FileStoreTable table) {
            CoreOptions options = table.coreOptions();
            Integer maxBuckets = options.dynamicBucketMaxBuckets();
            this.keys = table.createRowKeyExtractor();
            this.assigner = new HashBucketAssigner(table.snapshotManager(), UUID.randomUUID().toString(),
                    table.store().newIndexFileHandler(), 1, 1, 0, options.dynamicBucketTargetRowNum(),
                    maxBucketsNum(maxBuckets));
        }

        private static int maxBucketsNum(Integer maxBuckets) {
            return maxBuckets == null ? -1 : maxBuckets;
        }

        static DynamicBuckets of(Table table) {
            if (table instanceof FileStoreTable && ((FileStoreTable) table).bucketMode() == BucketMode.HASH_DYNAMIC) {
                return new DynamicBuckets((FileStoreTable) table);
            }
            return null;
        }

        int bucket(InternalRow row) {
            keys.setRecord(row);
            return assigner.assign(keys.partition(), keys.trimmedPrimaryKey().hashCode());
        }
    }

    static List<SchemaChange> schemaChanges(JsonNode changes) {
        List<SchemaChange> out = new ArrayList<>();
        for (JsonNode change : changes) {
            if (change.has("add_column")) {
                out.add(SchemaChange.addColumn(change.get("add_column").asText(), parseType(change.get("type").asText())));
            } else if (change.has("rename_column")) {
                out.add(SchemaChange.renameColumn(change.get("rename_column").asText(), change.get("to").asText()));
            } else if (change.has("drop_column")) {
                out.add(SchemaChange.dropColumn(change.get("drop_column").asText()));
            } else if (change.has("update_column_type")) {
                out.add(SchemaChange.updateColumnType(
                        change.get("update_column_type").asText(), parseType(change.get("type").asText())));
            } else if (change.has("set_option")) {
                out.add(SchemaChange.setOption(change.get("set_option").asText(), change.get("value").asText()));
            } else {
                throw new IllegalArgumentException("unknown schema change " + change);
            }
        }
        return out;
    }

    static Object fromJson(JsonNode node, DataType type) {
        if (node == null || node.isNull()) {
            return null;
        }
        switch (type.getTypeRoot()) {
            case BOOLEAN:
                return node.asBoolean();
            case TINYINT:
                return (byte) node.asInt();
            case SMALLINT:
                return (short) node.asInt();
            case INTEGER:
                return node.asInt();
            case BIGINT:
                return node.asLong();
            case FLOAT:
                return node.isTextual() ? Float.parseFloat(node.asText()) : (float) node.asDouble();
            case DOUBLE:
                return node.isTextual() ? Double.parseDouble(node.asText()) : node.asDouble();
            case DECIMAL: {
                DecimalType decimal = (DecimalType) type;
                Decimal value = Decimal.fromBigDecimal(
                        new BigDecimal(node.asText()), decimal.getPrecision(), decimal.getScale());
                if (value == null) {
                    throw new IllegalArgumentException(node.asText() + " does not fit " + type);
                }
                return value;
            }
            case CHAR:
            case VARCHAR:
                return BinaryString.fromString(node.asText());
            case BINARY:
            case VARBINARY:
                return Base64.getDecoder().decode(node.asText());
            case DATE:
                return (int) LocalDate.parse(node.asText()).toEpochDay();
            case TIME_WITHOUT_TIME_ZONE:
                return (int) (LocalTime.parse(node.asText()).toNanoOfDay() / 1_000_000L);
            case TIMESTAMP_WITHOUT_TIME_ZONE:
            case TIMESTAMP_WITH_LOCAL_TIME_ZONE:
                return Timestamp.fromLocalDateTime(LocalDateTime.parse(node.asText()));
            case ARRAY: {
                DataType element = ((ArrayType) type).getElementType();
                Object[] values = new Object[node.size()];
                for (int i = 0; i < values.length; i++) {
                    values[i] = fromJson(node.get(i), element);
                }
                return new GenericArray(values);
            }
            case MAP:
            case MULTISET: {
                DataType keyType = type instanceof MapType ? ((MapType) type).getKeyType()
                        : ((MultisetType) type).getElementType();
                DataType valueType = type instanceof MapType ? ((MapType) type).getValueType() : DataTypes.INT();
                Map<Object, Object> values = new LinkedHashMap<>();
                for (JsonNode pair : node) {
                    values.put(fromJson(pair.get(0), keyType), fromJson(pair.get(1), valueType));
                }
                return new GenericMap(values);
            }
            default:
                throw new IllegalArgumentException("cannot write a value of type " + type);
        }
    }

    /** Paimon's SQL type strings ("DECIMAL(10, 2) NOT NULL"), plus ARRAY, MAP and MULTISET. */
    static DataType parseType(String text) {
        String s = text.trim();
        boolean notNull = false;
        if (s.toUpperCase().endsWith(" NOT NULL")) {
            notNull = true;
            s = s.substring(0, s.length() - " NOT NULL".length()).trim();
        }
        String upper = s.toUpperCase();
        DataType type;
        if (upper.startsWith("ARRAY<") && s.endsWith(">")) {
            type = DataTypes.ARRAY(parseType(s.substring(6, s.length() - 1)));
        } else if (upper.startsWith("MULTISET<") && s.endsWith(">")) {
            type = DataTypes.MULTISET(parseType(s.substring(9, s.length() - 1)));
        } else if (upper.startsWith("MAP<") && s.endsWith(">")) {
            String inner = s.substring(4, s.length() - 1);
            int split = topLevelComma(inner);
            type = DataTypes.MAP(parseType(inner.substring(0, split)), parseType(inner.substring(split + 1)));
        } else {
            return DataTypeJsonParser.parseAtomicTypeSQLString(text.trim());
        }
        return type.copy(!notNull);
    }

    private static int topLevelComma(String text) {
        int depth = 0;
        for (int i = 0; i < text.length(); i++) {
            char c = text.charAt(i);
            if (c == '<' || c == '(') {
                depth++;
            } else if (c == '>' || c == ')') {
                depth--;
            } else if (c == ',' && depth == 0) {
                return i;
            }
        }
        throw new IllegalArgumentException("no key/value comma in MAP<" + text + ">");
    }

    // -- compact -------------------------------------------------------------------------------

    private static JsonNode compact(Catalog catalog, IOManager io, List<String> names, boolean full)
            throws Exception {
        ArrayNode results = NODES.arrayNode();
        for (String name : names) {
            Identifier id = Identifier.fromString(name);
            int compacted = compactTable(catalog.getTable(id), io, full);
            ObjectNode result = results.addObject().put("table", name).put("buckets", compacted);
            catalog.getTable(id).latestSnapshot().ifPresent(s -> result.put("snapshot", s.id()));
        }
        return results;
    }

    /**
     * Compacts every (partition, bucket) that holds data in one commit; returns how many. Append
     * tables without buckets have no per-bucket compaction: Paimon's coordinator plans their tasks.
     */
    private static int compactTable(Table writeOnly, IOManager io, boolean full) throws Exception {
        // a dedicated compaction job, as Paimon's CompactAction: it compacts write-only tables too
        Table table = writeOnly.copy(Map.of("write-only", "false"));
        if (table instanceof FileStoreTable && ((FileStoreTable) table).bucketMode() == BucketMode.BUCKET_UNAWARE
                && table.primaryKeys().isEmpty()) {
            return compactUnaware((FileStoreTable) table, io);
        }
        Map<BinaryRow, TreeSet<Integer>> buckets = new LinkedHashMap<>();
        for (Split split : table.newReadBuilder().newScan().plan().splits()) {
            DataSplit data = (DataSplit) split;
            buckets.computeIfAbsent(data.partition(), p -> new TreeSet<>(Comparator.naturalOrder()))
                    .add(data.bucket());
        }
        BatchWriteBuilder builder = table.newBatchWriteBuilder();
        int count = 0;
        try (BatchTableWrite write = builder.newWrite();
                BatchTableCommit commit = builder.newCommit()) {
            write.withIOManager(io);
            for (Map.Entry<BinaryRow, TreeSet<Integer>> entry : buckets.entrySet()) {
                for (int bucket : entry.getValue()) {
                    write.compact(entry.getKey(), bucket, full);
                    count++;
                }
            }
            commit.commit(write.prepareCommit());
        }
        return count;
    }

    private static int compactUnaware(FileStoreTable table, IOManager io) throws Exception {
        List<AppendCompactTask> tasks = new AppendCompactCoordinator(table, false).run();
        if (tasks.isEmpty()) {
            return 0;
        }
        List<CommitMessage> messages = new ArrayList<>();
        BaseAppendFileStoreWrite write = ((AppendOnlyFileStore) table.store()).newWrite(UUID.randomUUID().toString());
        try {
            write.withIOManager(io);
            for (AppendCompactTask task : tasks) {
                messages.add(task.doCompact(table, write));
            }
        } finally {
            write.close();
        }
        try (BatchTableCommit commit = table.newBatchWriteBuilder().newCommit()) {
            commit.commit(messages);
        }
        return tasks.size();
    }

    // -- session -------------------------------------------------------------------------------

    /**
     * Many commands in one JVM: each stdin line is a request, answered by one stdout line, {"ok":
     * result} or {"error": "Exception: message | caused by ..."} (a failed request does not end the
     * session). End of input ends it. Requests: {"command": "write", "spec": ..., "keep_going": b},
     * {"command": "read", "table", "snapshot"?, "options"?, "row_kind"?}, {"command": "read-many",
     * "jobs": [...]}, {"command": "compact", "tables": [...], "full": b}, and the catalog's own
     * operations (see {@link CatalogOps}): {"command": "catalog", "op": NAME, ...arguments}.
     */
    private static JsonNode session(Catalog catalog, IOManager io) throws Exception {
        java.io.BufferedReader in = new java.io.BufferedReader(
                new java.io.InputStreamReader(System.in, java.nio.charset.StandardCharsets.UTF_8));
        PrintStream out = SESSION_OUT;
        int served = 0;
        for (String line = in.readLine(); line != null; line = in.readLine()) {
            if (line.isBlank()) {
                continue;
            }
            ObjectNode answer = NODES.objectNode();
            try {
                answer.set("ok", serve(catalog, io, JSON.readTree(line)));
            } catch (Throwable t) {
                answer.put("error", describe(t));
            }
            out.println(JSON.writeValueAsString(answer));
            out.flush();
            served++;
        }
        return NODES.objectNode().put("served", served);
    }

    private static JsonNode serve(Catalog catalog, IOManager io, JsonNode request) throws Exception {
        String command = request.path("command").asText();
        switch (command) {
            case "write":
                return write(catalog, io, request.get("spec"), request.path("keep_going").asBoolean(false));
            case "read": {
                Map<String, String> options = new LinkedHashMap<>();
                request.path("options").fields().forEachRemaining(e -> options.put(e.getKey(), e.getValue().asText()));
                String snapshot = request.hasNonNull("snapshot") ? request.get("snapshot").asText() : null;
                return read(catalog, request.get("table").asText(), snapshot, options,
                        request.path("row_kind").asBoolean(false));
            }
            case "read-many":
                return readMany(catalog, request.get("jobs"));
            case "compact":
                return compact(catalog, io, strings(request.get("tables")), request.path("full").asBoolean(false));
            case "catalog":
                return CatalogOps.run(catalog, request);
            default:
                throw new IllegalArgumentException("unknown session command " + command);
        }
    }

    /** stdout as it was before main moved System.out to stderr: the session's answers. */
    private static PrintStream SESSION_OUT = System.out;

    // -- selftest ------------------------------------------------------------------------------

    /**
     * Writes, compacts and reads back two small tables (a primary-key table with deletion vectors
     * and lookup changelog, an append table): proves the installation and, run once with
     * -XX:ArchiveClassesAtExit, loads every class the other commands need into a CDS archive.
     */
    private static JsonNode selftest(Catalog catalog, IOManager io) throws Exception {
        String fields = "[{\"name\": \"id\", \"type\": \"BIGINT NOT NULL\"}, {\"name\": \"s\", \"type\": \"STRING\"},"
                + " {\"name\": \"d\", \"type\": \"DECIMAL(10, 2)\"}, {\"name\": \"ts\", \"type\": \"TIMESTAMP(6)\"},"
                + " {\"name\": \"day\", \"type\": \"DATE\"}, {\"name\": \"b\", \"type\": \"BYTES\"},"
                + " {\"name\": \"tags\", \"type\": \"ARRAY<STRING>\"}]";
        String rows = "[{\"id\": 1, \"s\": \"one\", \"d\": \"1.50\", \"ts\": \"2024-01-01T00:00:00.000001\","
                + " \"day\": \"2024-02-29\", \"b\": \"AAE=\", \"tags\": [\"x\", null]},"
                + " {\"id\": 2, \"s\": \"two\"}, {\"id\": 3, \"s\": \"three\"}]";
        String spec = "[{\"table\": \"selftest.pk\", \"fields\": " + fields + ", \"primary_keys\": [\"id\"],"
                + " \"options\": {\"bucket\": \"2\", \"deletion-vectors.enabled\": \"true\","
                + " \"changelog-producer\": \"lookup\"}, \"commits\": [{\"rows\": " + rows + "},"
                + " {\"rows\": [{\"_kind\": \"-D\", \"id\": 2}, {\"id\": 3, \"s\": \"THREE\"}]},"
                + " {\"compact\": true, \"full\": true}]},"
                + " {\"table\": \"selftest.log\", \"fields\": " + fields + ", \"partition_keys\": [\"s\"],"
                + " \"commits\": [{\"rows\": " + rows + "}, {\"rows\": " + rows + "}]}]";
        ObjectNode result = NODES.objectNode();
        result.set("write", write(catalog, io, JSON.readTree(spec), false));
        ArrayNode reads = result.putArray("reads");
        reads.add(read(catalog, "selftest.pk", null, Map.of(), false));
        reads.add(read(catalog, "selftest.log", null, Map.of(), false));
        reads.add(read(catalog, "selftest.pk$ro", "1", Map.of(), false));
        reads.add(read(catalog, "selftest.pk", null, Map.of("incremental-between", "1,3"), true));
        compact(catalog, io, List.of("selftest.pk", "selftest.log"), true);
        return result;
    }

    // -- helpers -------------------------------------------------------------------------------

    private static List<String> strings(JsonNode array) {
        List<String> out = new ArrayList<>();
        array.forEach(n -> out.add(n.asText()));
        return out;
    }

    /** Arguments after the command's warehouse that are neither flags nor flag values. */
    private static List<String> positional(String[] args) {
        List<String> out = new ArrayList<>();
        for (int i = 2; i < args.length; i++) {
            if (args[i].equals("--snapshot") || args[i].equals("--option")) {
                i++;
            } else if (!args[i].startsWith("--")) {
                out.add(args[i]);
            }
        }
        return out;
    }

    private static String flagValue(String[] args, String flag) {
        for (int i = 3; i < args.length - 1; i++) {
            if (args[i].equals(flag)) {
                return args[i + 1];
            }
        }
        return null;
    }

    private static Map<String, String> flagOptions(String[] args) {
        Map<String, String> options = new LinkedHashMap<>();
        for (int i = 3; i < args.length - 1; i++) {
            if (args[i].equals("--option")) {
                String[] pair = args[i + 1].split("=", 2);
                if (pair.length != 2) {
                    throw new IllegalArgumentException("--option needs KEY=VALUE, got " + args[i + 1]);
                }
                options.put(pair[0], pair[1]);
            }
        }
        return options;
    }

    /** The exception and its causes on one line. */
    private static String describe(Throwable t) {
        StringBuilder out = new StringBuilder();
        for (Throwable cause = t; cause != null; cause = cause.getCause() == cause ? null : cause.getCause()) {
            if (out.length() > 0) {
                out.append(" | caused by ");
            }
            out.append(cause.getClass().getName()).append(": ").append(cause.getMessage());
        }
        return out.toString().replace('\n', ' ');
    }

    private static void deleteTree(Path root) {
        try (Stream<Path> paths = Files.walk(root)) {
            paths.sorted(Comparator.reverseOrder()).forEach(p -> p.toFile().delete());
        } catch (Exception ignored) {
            // scratch space only
        }
    }
}
